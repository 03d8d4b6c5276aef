import { type Clock, systemClock } from "./clock.js";
import { asError } from "./errors.js";
import { Endpoint, type FetchLike, failure, noAnswer, withTimeout } from "./http.js";
import type { TokenResponse } from "./wire.js";

/** TokenSource gives the bearer tokens requests carry. */
export interface TokenSource {
  /** token returns a token, from a cache while it is fresh. */
  token(signal?: AbortSignal): Promise<string>;
  /**
   * invalidate drops token from the cache after the bus refused it with
   * 401, so that the next token() fetches a new one.
   */
  invalidate(token: string): void;
}

/** ClientCredentialsOptions configure a ClientCredentials. */
export interface ClientCredentialsOptions {
  /** url is the bus's base URL ("https://bus.example.org"). */
  url: string;
  /** workspace is the workspace id, the {t} of the routes. */
  workspace: string;
  /** clientId is the connection's client id. */
  clientId: string;
  /**
   * clientSecret is the connection's client secret. Without one, the
   * transport's TLS client certificate authenticates the connection
   * (tlsFetch with certFile and keyFile), and the tokens are bound to it.
   */
  clientSecret?: string;
  /** fetch sends the token requests; default the global fetch. */
  fetch?: FetchLike;
  /** timeoutMs bounds one token request; default 30 s. */
  timeoutMs?: number;
  /** clock defaults to the wall clock. */
  clock?: Clock;
  /**
   * leewayMs is how long before its expiry a token is replaced; default
   * one minute, and never more than half the token's lifetime.
   */
  leewayMs?: number;
}

/**
 * ClientCredentials is a TokenSource that gets tokens from the workspace's
 * token endpoint, POST /v1/tenants/{t}/tokens, by the OAuth2
 * client-credentials grant, with the connection's client id and secret as
 * HTTP Basic credentials (client_secret_basic), and keeps each until
 * shortly before it expires. A refused request is a StorybusError with the
 * answer's status, its OAuth2 error code and its rule (401 invalid_client
 * auth.credentials.invalid, 400 unauthorized_client connection.inactive).
 */
export class ClientCredentials implements TokenSource {
  readonly #o: ClientCredentialsOptions;
  readonly #endpoint: Endpoint;
  #token = "";
  #refreshAt = 0;
  #inFlight: Promise<TokenResponse> | undefined;

  constructor(options: ClientCredentialsOptions) {
    this.#o = { ...options };
    this.#endpoint = new Endpoint(options.url, options.workspace, options.fetch);
  }

  /** token returns the cached token, or fetches a new one when there is none or it is about to expire. */
  async token(signal?: AbortSignal): Promise<string> {
    if (this.#token !== "" && this.#clock().now().getTime() < this.#refreshAt) return this.#token;
    // Callers at the same moment share one request.
    this.#inFlight ??= this.fetchToken(signal)
      .then((tr) => {
        const lifeMs = tr.expires_in * 1000;
        const leeway = Math.min(this.#o.leewayMs && this.#o.leewayMs > 0 ? this.#o.leewayMs : 60_000, lifeMs / 2);
        this.#token = tr.access_token;
        this.#refreshAt = this.#clock().now().getTime() + lifeMs - leeway;
        return tr;
      })
      .finally(() => {
        this.#inFlight = undefined;
      });
    return (await this.#inFlight).access_token;
  }

  /** invalidate drops token if it is the cached one. */
  invalidate(token: string): void {
    if (this.#token === token) this.#token = "";
  }

  /** fetchToken gets a new token, bypassing and not touching the cache. */
  async fetchToken(signal?: AbortSignal): Promise<TokenResponse> {
    const { clientId, clientSecret } = this.#o;
    const form = new URLSearchParams({ grant_type: "client_credentials" });
    const headers: Record<string, string> = {};
    if (clientSecret) {
      // Never both ways at once: a wrong secret would count as two failed
      // attempts. RFC 6749 §2.3.1 form-encodes both before Basic.
      headers.Authorization = `Basic ${Buffer.from(`${formEncode(clientId)}:${formEncode(clientSecret)}`).toString("base64")}`;
    } else {
      form.set("client_id", clientId);
    }
    const t = withTimeout(signal, this.#o.timeoutMs && this.#o.timeoutMs > 0 ? this.#o.timeoutMs : 30_000);
    let a;
    try {
      a = await this.#endpoint.do(
        { method: "POST", path: "/tokens", body: form.toString(), contentType: "application/x-www-form-urlencoded", headers },
        t.signal,
      );
    } catch (err) {
      throw asError(err) ?? noAnswer(err);
    } finally {
      t.clear();
    }
    if (a.status < 200 || a.status > 299) throw failure(a, this.#clock().now());
    const j = a.json as Partial<Record<keyof TokenResponse, unknown>>;
    const expiresIn = typeof j.expires_in === "number" ? j.expires_in : 0;
    if (
      typeof j.access_token !== "string" ||
      j.access_token === "" ||
      typeof j.token_type !== "string" ||
      j.token_type.toLowerCase() !== "bearer" ||
      expiresIn < 1
    ) {
      throw noAnswer(new Error("the token endpoint's answer is not a bearer token with expires_in"));
    }
    return { access_token: j.access_token, token_type: "Bearer", expires_in: Math.floor(expiresIn) };
  }

  #clock(): Clock {
    return this.#o.clock ?? systemClock;
  }
}

/**
 * StaticToken is a TokenSource that always gives the same token, for a
 * token obtained elsewhere (storybus token). It cannot refresh.
 */
export class StaticToken implements TokenSource {
  readonly #token: string;

  constructor(token: string) {
    this.#token = token;
  }

  /** token returns the token. */
  async token(): Promise<string> {
    return this.#token;
  }

  /** invalidate does nothing: a static token cannot be refreshed. */
  invalidate(): void {}
}

/** formEncode encodes as application/x-www-form-urlencoded does (Go's url.QueryEscape). */
function formEncode(s: string): string {
  return encodeURIComponent(s)
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replaceAll("%20", "+");
}

