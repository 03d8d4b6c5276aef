import { readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import type { FetchLike } from "./http.js";

/** TLSFiles name the PEM files of a client's TLS to the bus. */
export interface TLSFiles {
  /**
   * caFile holds the certificates of the authorities the bus's certificate
   * is checked against, instead of Node.js's bundled roots (as curl's
   * --cacert). Left out: those roots, and NODE_EXTRA_CA_CERTS when set.
   */
  caFile?: string;
  /** certFile is the client's certificate, for a bus that takes mutual TLS; with keyFile or not at all. */
  certFile?: string;
  /** keyFile is the key of certFile. */
  keyFile?: string;
}

/**
 * tlsFetch returns a fetch for the bus with the TLS of files, to pass as
 * the `fetch` of Options, ConsumerOptions and ClientCredentialsOptions
 * alike. Node's global fetch cannot present a client certificate without a
 * dispatcher of the undici package, which this package does not depend on,
 * so tlsFetch sends its requests with node:https instead (HTTP/1.1, with
 * keep-alive, TLS 1.2 at least). It implements what the client uses of
 * fetch: method, headers, a string or byte body, and signal. It throws when
 * a file cannot be read, or when only one of certFile and keyFile is given.
 */
export function tlsFetch(files: TLSFiles = {}): FetchLike {
  const options: https.AgentOptions = { keepAlive: true, minVersion: "TLSv1.2" };
  if (files.caFile) {
    const pem = readPEM(files.caFile, "CA file");
    if (!pem.includes("-----BEGIN CERTIFICATE-----")) {
      throw new Error(`storybus: CA file ${files.caFile} holds no PEM certificate`);
    }
    options.ca = pem;
  }
  if (!files.certFile !== !files.keyFile) {
    throw new Error("storybus: a client certificate needs both its certificate and key files");
  }
  if (files.certFile && files.keyFile) {
    options.cert = readPEM(files.certFile, "client certificate");
    options.key = readPEM(files.keyFile, "client key");
  }
  const tlsAgent = new https.Agent(options);
  const plainAgent = new http.Agent({ keepAlive: true });

  return (input, init) =>
    new Promise<Response>((resolve, reject) => {
      const url = new URL(input);
      const secure = url.protocol === "https:";
      const headers: Record<string, string> = {};
      new Headers(init.headers).forEach((v, k) => (headers[k] = v));
      const body = toBuffer(init.body);
      if (body) headers["content-length"] = String(body.byteLength);
      const req = (secure ? https : http).request(url, {
        method: init.method ?? "GET",
        headers,
        agent: secure ? tlsAgent : plainAgent,
        signal: init.signal ?? undefined,
      });
      req.on("error", reject);
      req.on("response", (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () => {
          const h = new Headers();
          for (const [k, v] of Object.entries(res.headers)) {
            for (const one of Array.isArray(v) ? v : v === undefined ? [] : [v]) h.append(k, one);
          }
          const status = res.statusCode ?? 0;
          const nullBody = status === 204 || status === 205 || status === 304;
          try {
            resolve(new Response(nullBody ? null : Buffer.concat(chunks), { status, statusText: res.statusMessage ?? "", headers: h }));
          } catch (err) {
            reject(err);
          }
        });
      });
      req.end(body);
    });
}

function readPEM(file: string, what: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    throw new Error(`storybus: ${what}: ${(err as Error).message}`, { cause: err });
  }
}

function toBuffer(body: RequestInit["body"]): Buffer | undefined {
  if (body === undefined || body === null) return undefined;
  if (typeof body === "string") return Buffer.from(body, "utf8");
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (body instanceof URLSearchParams) return Buffer.from(body.toString(), "utf8");
  if (body instanceof ArrayBuffer) return Buffer.from(body);
  throw new TypeError("storybus: tlsFetch sends string and byte bodies only");
}
