import { type Clock, systemClock } from "./clock.js";
import { asError } from "./errors.js";
import { type Answer, Endpoint, type FetchLike, failure, formatDuration, noAnswer, type Request, withTimeout } from "./http.js";
import { Dedup, newDedup } from "./dedup.js";
import { rawMessages } from "./rawjson.js";
import { backoff, type RetryPolicy, withDefaults } from "./retry.js";
import type { TokenSource } from "./token.js";
import type { AckRequest, Family, MessageType, SOMMessage } from "./wire.js";

/** AckBody is an AckRequest whose action may be left out, for a plain ack. */
type AckBody = Omit<AckRequest, "action"> & { action?: AckRequest["action"] };

/** ConsumerOptions configure a Consumer. */
export interface ConsumerOptions {
  /** url is the bus's base URL. */
  url: string;
  /** workspace is the workspace id. */
  workspace: string;
  /**
   * name is the consumer's name: 1 to 64 letters, digits, '-' or '_'. It
   * names a durable subscription: a consumer that comes back under the same
   * name carries on where it left off. It belongs to the connection that
   * first used it.
   */
  name: string;
  /** families are the families to receive; none means every family the connection may consume. */
  families?: Family[];
  /** tokens gives the bearer tokens; usually a ClientCredentials. */
  tokens: TokenSource;
  /** fetch sends the requests; default the global fetch. */
  fetch?: FetchLike;
  /** max is the most messages one pull returns, 1 to 100; default 10. */
  max?: number;
  /**
   * waitMs is how long a pull waits for a first message, up to 20 s;
   * default 20 s.
   */
  waitMs?: number;
  /** noWait makes every pull return at once. */
  noWait?: boolean;
  /** dedup drops redelivered messages; default newDedup({clock}), in memory. openDedup's keeps them across restarts. */
  dedup?: Dedup;
  /** retry paces the pulls after failures (the attempts are not bounded: run keeps pulling until it is stopped). */
  retry?: RetryPolicy;
  /** clock defaults to the wall clock. */
  clock?: Clock;
  /** jitter returns a random fraction in [0, 1); default Math.random. */
  jitter?: () => number;
  /** onError, when set, is told of every failed pull, acknowledgement and handler call that run carries on after. */
  onError?: (err: unknown) => void;
}

/** Delivery is one delivered message. */
export interface Delivery {
  /** messageId is the message's message_id. */
  messageId: string;
  /** messageType is the message's message_type. */
  messageType: MessageType;
  /** family is the family the message was published to. */
  family: Family;
  /** ackId acknowledges this delivery, and only this one. */
  ackId: string;
  /** delivery counts the deliveries of the message to this consumer: 2 and more are redeliveries. */
  delivery: number;
  /**
   * traceparent and tracestate are the W3C trace context the message was
   * published in, when its producer or the bus traced it: continue that
   * trace when handling the message (with OpenTelemetry,
   * `propagation.extract(ROOT_CONTEXT, delivery)`).
   */
  traceparent?: string;
  /** tracestate is the W3C tracestate that goes with traceparent, when there was one. */
  tracestate?: string;
  /** message is the SOM message, parsed. */
  message: SOMMessage;
  /** raw is the SOM message exactly as the bus accepted it, byte for byte. */
  raw: string;
}

/** HandlerContext is what a Handler is given beside the delivery. */
export interface HandlerContext {
  /** signal aborts when the consumer is stopped. */
  signal: AbortSignal;
}

/**
 * Handler handles one message. A throw (or a rejection) leaves the message
 * unacknowledged: it is delivered again after the ack timeout.
 */
export type Handler = (delivery: Delivery, context: HandlerContext) => void | Promise<void>;

/** RunOptions are the options of Consumer.run and Consumer.runOnce. */
export interface RunOptions {
  /** signal stops the consumer. */
  signal?: AbortSignal;
}

/** ackTimeoutMs bounds the acknowledgement of a handled batch. */
const ackTimeoutMs = 10_000;

const namePattern = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Consumer pulls a workspace's messages over the bus's HTTP pull API.
 * Delivery is at least once: a message not acknowledged within the bus's
 * ack timeout (30 s) is delivered again, and run drops the duplicates by
 * message_id.
 */
export class Consumer {
  readonly #endpoint: Endpoint;
  readonly #o: ConsumerOptions;
  readonly #dedup: Dedup;
  readonly #query: string;
  readonly #timeoutMs: number;
  readonly #retry: Required<RetryPolicy>;
  readonly #clock: Clock;
  readonly #jitter: () => number;

  /** constructor throws a TypeError for a bad name, or options without a URL, a workspace or tokens. */
  constructor(options: ConsumerOptions) {
    if (!namePattern.test(options.name)) {
      throw new TypeError("storybus: a consumer name is 1 to 64 letters, digits, '-' or '_'");
    }
    if (!options.tokens) throw new TypeError("storybus: a TokenSource is required");
    this.#endpoint = new Endpoint(options.url, options.workspace, options.fetch);
    this.#o = { ...options };
    this.#clock = options.clock ?? systemClock;
    this.#jitter = options.jitter ?? Math.random;
    this.#retry = withDefaults(options.retry);
    this.#dedup = options.dedup ?? newDedup({ clock: this.#clock });
    const waitMs = options.noWait ? 0 : options.waitMs && options.waitMs > 0 ? Math.min(options.waitMs, 20_000) : 20_000;
    const q = new URLSearchParams({
      max: String(options.max && options.max > 0 ? options.max : 10),
      wait: formatDuration(waitMs),
    });
    if (options.families && options.families.length > 0) q.set("family", options.families.join(","));
    this.#query = q.toString();
    this.#timeoutMs = waitMs + 15_000;
  }

  /** dedup returns the consumer's de-duplicator. */
  get dedup(): Dedup {
    return this.#dedup;
  }

  /**
   * fetch pulls once: it resolves as soon as a message is there, with up to
   * max of them, or empty-handed after the wait. Duplicates are not dropped
   * here; run drops them. A 401 is retried once with a fresh token.
   */
  async fetch(options: RunOptions = {}): Promise<Delivery[]> {
    const a = await this.#call({ method: "GET", path: `/consumers/${this.#o.name}/messages?${this.#query}` }, options.signal);
    const messages = (a.json as { messages?: unknown }).messages;
    if (!Array.isArray(messages)) throw noAnswer(new Error("the pull answer is not JSON"));
    const raws = rawMessages(a.body);
    return messages.map((d: Record<string, unknown>, i): Delivery => {
      const out: Delivery = {
        messageId: String(d.message_id ?? ""),
        messageType: d.message_type as MessageType,
        family: d.family as Family,
        ackId: String(d.ack_id ?? ""),
        delivery: typeof d.delivery === "number" ? d.delivery : 0,
        message: d.message as SOMMessage,
        raw: raws[i] ?? JSON.stringify(d.message),
      };
      if (typeof d.traceparent === "string") out.traceparent = d.traceparent;
      if (typeof d.tracestate === "string") out.tracestate = d.tracestate;
      return out;
    });
  }

  /** ack acknowledges deliveries: they are not delivered again. */
  ack(deliveries: Delivery[], options: RunOptions = {}): Promise<void> {
    // No action: a plain ack, which every bus understands.
    return this.#settle({ ack_ids: [] }, deliveries, options.signal);
  }

  /**
   * nak gives deliveries back unhandled: they are delivered again after
   * delayMs (0: at once; at most an hour).
   */
  nak(deliveries: Delivery[], delayMs = 0, options: RunOptions = {}): Promise<void> {
    const r: AckBody = { ack_ids: [], action: "nak" };
    if (delayMs > 0) r.delay = formatDuration(delayMs);
    return this.#settle(r, deliveries, options.signal);
  }

  /** inProgress reports that deliveries are still being handled: their ack timeout (30 s) starts again. */
  inProgress(deliveries: Delivery[], options: RunOptions = {}): Promise<void> {
    return this.#settle({ ack_ids: [], action: "in_progress" }, deliveries, options.signal);
  }

  /** term gives up on deliveries the consumer can never handle: they are not delivered again, as if acknowledged. */
  term(deliveries: Delivery[], options: RunOptions = {}): Promise<void> {
    return this.#settle({ ack_ids: [], action: "term" }, deliveries, options.signal);
  }

  /** settle sends r's action for deliveries, at most 1,000 per request. */
  async #settle(r: AckBody, deliveries: Delivery[], signal: AbortSignal | undefined): Promise<void> {
    for (let i = 0; i < deliveries.length; i += 1000) {
      const body = { ...r, ack_ids: deliveries.slice(i, i + 1000).map((d) => d.ackId) };
      await this.#call({ method: "POST", path: `/consumers/${this.#o.name}/acks`, body: JSON.stringify(body) }, signal);
    }
  }

  /**
   * call sends one request with a token, once more with a fresh token after
   * a 401, and resolves with a 200 answer or rejects with a StorybusError.
   */
  async #call(r: Request, signal: AbortSignal | undefined): Promise<Answer> {
    for (let refreshed = false; ; refreshed = true) {
      let token: string;
      try {
        token = await this.#o.tokens.token(signal);
      } catch (err) {
        throw asError(err) ?? noAnswer(err);
      }
      const t = withTimeout(signal, this.#timeoutMs);
      let a: Answer;
      try {
        a = await this.#endpoint.do({ ...r, headers: { Authorization: `Bearer ${token}` } }, t.signal);
      } catch (err) {
        throw noAnswer(err);
      } finally {
        t.clear();
      }
      if (a.status === 200) return a;
      if (a.status === 401 && !refreshed) {
        this.#o.tokens.invalidate(token);
        continue;
      }
      throw failure(a, this.#clock.now());
    }
  }

  /**
   * run pulls and hands every message to h, once per message_id, until the
   * signal aborts, when it resolves; the messages of a pull that come after
   * that are left unacknowledged, to be delivered again. A handled message
   * is acknowledged; a duplicate of a handled one is acknowledged without
   * calling h. Temporary failures (no answer, 429, 5xx) are retried with
   * backoff, honouring Retry-After, for as long as it runs; any other
   * failure (a 401 after a fresh token, a 403) rejects with that error.
   */
  async run(h: Handler, options: RunOptions = {}): Promise<void> {
    const signal = options.signal ?? new AbortController().signal;
    let failures = 0;
    while (!signal.aborted) {
      let ds: Delivery[];
      try {
        ds = await this.fetch({ signal });
      } catch (err) {
        if (signal.aborted) return;
        const e = asError(err);
        if (!e || !e.temporary()) throw err;
        this.#report(err);
        failures++;
        try {
          await this.#clock.sleep(Math.max(backoff(this.#retry, failures, this.#jitter()), e.retryAfterMs), signal);
        } catch {
          return;
        }
        continue;
      }
      failures = 0;
      await this.#handle(ds, h, signal);
    }
  }

  /**
   * runOnce pulls once and hands what came to h as run does: duplicates are
   * acknowledged without calling h, handled messages are acknowledged, and
   * a message h fails is left to be delivered again. A failed pull rejects,
   * and is not retried.
   */
  async runOnce(h: Handler, options: RunOptions = {}): Promise<void> {
    const signal = options.signal ?? new AbortController().signal;
    await this.#handle(await this.fetch({ signal }), h, signal);
  }

  #report(err: unknown): void {
    this.#o.onError?.(err);
  }

  /**
   * handle hands a pull's messages to h, once per message_id, until the
   * signal aborts, and acknowledges the handled ones and the duplicates.
   */
  async #handle(ds: Delivery[], h: Handler, signal: AbortSignal): Promise<void> {
    const done: Delivery[] = [];
    for (const d of ds) {
      if (signal.aborted) break;
      if (d.messageId !== "" && this.#dedup.seen(d.messageId)) {
        done.push(d);
        continue;
      }
      try {
        await h(d, { signal });
      } catch (err) {
        this.#report(err);
        continue;
      }
      if (d.messageId !== "") {
        try {
          this.#dedup.done(d.messageId);
        } catch (err) {
          this.#report(err);
        }
      }
      done.push(d);
    }
    if (done.length > 0) {
      // Handled messages are acknowledged even when the signal has just
      // aborted. A failed acknowledgement means a redelivery, which the
      // de-duplicator drops.
      try {
        await this.ack(done, { signal: AbortSignal.timeout(ackTimeoutMs) });
      } catch (err) {
        this.#report(err);
      }
    }
  }
}

