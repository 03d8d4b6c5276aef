import { createHash } from "node:crypto";
import { type Clock, systemClock } from "./clock.js";
import { asError, HeldError, NoAnswerError, StorybusError } from "./errors.js";
import { type Answer, Endpoint, type FetchLike, failure, noAnswer, type TraceContext, traceHeaders, withTimeout } from "./http.js";
import { LRU } from "./lru.js";
import { Message } from "./message.js";
import type { Entry, Outbox } from "./outbox.js";
import { backoff, type RetryPolicy, withDefaults } from "./retry.js";
import type { TokenSource } from "./token.js";
import type { Violation } from "./wire.js";

/** SANDBOX_ANSWER_HEADER is the header that asks a sandbox workspace for an answer. */
export const SANDBOX_ANSWER_HEADER = "Storybus-Sandbox-Answer";

/** SANDBOX_LOST is the sandbox answer that publishes the message and drops the connection. */
export const SANDBOX_LOST = "lost";

/** Options configure a Client. */
export interface Options {
  /** url is the bus's base URL ("https://bus.example.org"). */
  url: string;
  /** workspace is the workspace id, the {t} of the routes. */
  workspace: string;
  /** tokens gives the bearer tokens; usually a ClientCredentials. */
  tokens: TokenSource;
  /**
   * fetch sends the requests; default the global fetch. tlsFetch gives one
   * with a private CA or a client certificate.
   */
  fetch?: FetchLike;
  /**
   * attemptTimeoutMs bounds one attempt; default 15 s, longer than the
   * bus's own 10 s bound on a publish.
   */
  attemptTimeoutMs?: number;
  /** retry is the retry policy; fields left out take the defaults. */
  retry?: RetryPolicy;
  /**
   * outbox keeps the messages whose retries are exhausted. Without one,
   * such a message is returned to the caller only, and is the caller's to
   * keep.
   */
  outbox?: Outbox;
  /** clock tells the time and waits between attempts; default the wall clock. */
  clock?: Clock;
  /** jitter returns a random fraction in [0, 1) for the backoff; default Math.random. */
  jitter?: () => number;
  /**
   * onAlert, when set, is called for every failure a person must act on
   * (StorybusError.needsAlert): 400, 413, a reused message_id, a 401 after
   * a fresh token, 403.
   */
  onAlert?: (e: StorybusError) => void;
  /**
   * sandboxAnswer sends the Storybus-Sandbox-Answer header with every
   * publish attempt, for a producer's tests against a sandbox workspace
   * (storybus dev's): a rule id, or "lost". A function chooses per attempt
   * (attempt counts from 1 for each message). A workspace that is not a
   * sandbox refuses the header with 400 sandbox.not_enabled.
   */
  sandboxAnswer?: string | ((attempt: number, message: Message) => string | undefined);
  /**
   * traceContext returns the trace context of the moment, for publishes
   * that are not given one (PublishOptions.trace): with OpenTelemetry,
   * `() => { const c = {}; propagation.inject(context.active(), c); return c; }`.
   */
  traceContext?: () => TraceContext | undefined;
}

/** PublishOptions are the options of one publish. */
export interface PublishOptions {
  /**
   * signal ends the publish: the message is then kept in the outbox (with
   * a NoAnswerError whose cause is the signal's reason).
   */
  signal?: AbortSignal;
  /** trace is the W3C trace context the publish continues. */
  trace?: TraceContext;
  /**
   * sandboxAnswer sends the Storybus-Sandbox-Answer header with every
   * attempt of this publish, instead of Options.sandboxAnswer's.
   */
  sandboxAnswer?: string;
}

/** Result is a message's final success. */
export interface Result {
  /** messageId is the message's message_id. */
  messageId: string;
  /** messageType is the message's message_type. */
  messageType: string;
  /** family is the family the bus published the message to; "" on 200 duplicate, whose answer names none. */
  family: string;
  /** status is 202 (accepted and published) or 200 (already published). */
  status: number;
  /** duplicate is set on 200: this exact message was published before. */
  duplicate: boolean;
  /** tolerated lists warnings: log them, they are not failures. */
  tolerated: Violation[];
  /** attempts is how many times the message was sent. */
  attempts: number;
}

/** ResendResult is what became of one outbox entry in a resend. */
export interface ResendResult {
  /** entry is the outbox entry, where it is after the resend. */
  entry: Entry;
  /** result is set when the message was delivered (202 or 200); the entry is removed. */
  result?: Result;
  /**
   * error is set otherwise: the entry stays pending (a temporary failure,
   * and the story's later entries wait), or moved to refused (a final
   * refusal), or waits behind an earlier entry of its story (a HeldError
   * cause).
   */
  error?: Error;
}

/**
 * Pending is a message handed to Client.send: its final answer comes
 * later.
 */
export class Pending {
  /** message is the message. */
  readonly message: Message;
  readonly #result: Promise<Result>;
  #done = false;

  /** @internal */
  constructor(message: Message, result: Promise<Result>) {
    this.message = message;
    this.#result = result;
    // A rejection is the caller's to read through wait(); never an
    // unhandled one.
    result.then(
      () => (this.#done = true),
      () => (this.#done = true),
    );
  }

  /** done reports whether the message has its final answer. */
  get done(): boolean {
    return this.#done;
  }

  /** wait resolves with the final success, or rejects with a StorybusError. */
  wait(): Promise<Result> {
    return this.#result;
  }
}

/** maxRefused bounds the memory of snapshots refused with 409. */
const maxRefused = 10_000;

interface Attempt {
  answer?: Answer;
  token: string;
  error?: StorybusError;
}

/**
 * Client publishes SOM messages with the documented retry discipline:
 *
 * - a message is built once and every retry sends the identical bytes
 *   (Message, build);
 * - only timeouts, network errors, 408, 429 (honouring Retry-After) and
 *   5xx are retried, with exponential backoff and jitter (0.5 s, 1 s, 2 s …
 *   capped at 30 s), for a bounded number of attempts that covers at least
 *   30 s (RetryPolicy);
 * - a 401 is retried once with a fresh token, then the client stops;
 * - 400, 403, 409 and 413 are never retried, and a snapshot refused with
 *   409 is never sent again;
 * - while one of a story's messages is retried, the story's next messages
 *   wait; other stories carry on (send);
 * - a message whose retries are exhausted is kept, unchanged, in the
 *   outbox, and resent later in story order (resend).
 */
export class Client {
  readonly #endpoint: Endpoint;
  readonly #tokens: TokenSource;
  readonly #timeoutMs: number;
  readonly #retry: Required<RetryPolicy>;
  readonly #outbox: Outbox | undefined;
  readonly #clock: Clock;
  readonly #jitter: () => number;
  readonly #o: Options;
  /** The last turn of each story's queue; a story without one has none waiting. */
  readonly #stories = new Map<string, Promise<void>>();
  /** The snapshots the bus refused with 409, so that they are never sent again. */
  readonly #refused = new LRU<{ sum: string; error: StorybusError }>(maxRefused);

  /** constructor throws a TypeError for options without a URL, a workspace or tokens. */
  constructor(options: Options) {
    this.#endpoint = new Endpoint(options.url, options.workspace, options.fetch);
    if (!options.tokens) throw new TypeError("storybus: a TokenSource is required");
    this.#o = { ...options };
    this.#tokens = options.tokens;
    this.#timeoutMs = options.attemptTimeoutMs && options.attemptTimeoutMs > 0 ? options.attemptTimeoutMs : 15_000;
    this.#retry = withDefaults(options.retry);
    this.#outbox = options.outbox;
    this.#clock = options.clock ?? systemClock;
    this.#jitter = options.jitter ?? Math.random;
  }

  /**
   * publish sends m and resolves with its final success (202, or 200
   * duplicate), or rejects with a StorybusError. It waits behind the
   * earlier messages of m's story that are still being sent, retries as the
   * policy says, and keeps m in the outbox when the retries are exhausted,
   * when the credentials are refused, or when the signal aborts before a
   * final answer.
   */
  publish(m: Message, options: PublishOptions = {}): Promise<Result> {
    return this.send(m, options).wait();
  }

  /**
   * send queues m behind the earlier messages of its story and publishes it
   * in the background, as publish does. Messages of one story are sent in
   * the order they were handed to send, each only once the one before has
   * its final answer; other stories carry on meanwhile.
   */
  send(m: Message, options: PublishOptions = {}): Pending {
    const key = m.key;
    const turn = this.#enqueue(key);
    const result = (async () => {
      // In order even when the signal aborted: the message is then kept.
      const release = await turn;
      try {
        return await this.#publishInTurn(m, options);
      } finally {
        release();
      }
    })();
    return new Pending(m, result);
  }

  /**
   * resend resends the outbox's pending messages, each story's in order,
   * oldest story first. A delivered message leaves the outbox; a refused
   * one moves to its refused entries; after a temporary failure the story's
   * later messages stay kept, behind it. It rejects only for the outbox
   * itself.
   */
  async resend(options: { signal?: AbortSignal } = {}): Promise<ResendResult[]> {
    const outbox = this.#outbox;
    if (!outbox) throw new Error("storybus: no outbox to resend");
    const keys: string[] = [];
    for (const e of await outbox.list()) {
      if (!keys.includes(e.key)) keys.push(e.key);
    }
    const out: ResendResult[] = [];
    for (const key of keys) {
      const release = await this.#enqueue(key);
      try {
        out.push(...(await this.#drain(outbox, key, options)).results);
      } finally {
        release();
      }
    }
    return out;
  }

  /**
   * enqueue takes a turn in the story's queue, at once; the promise
   * resolves, with the function that ends the turn, when it is this turn's
   * go.
   */
  #enqueue(key: string): Promise<() => void> {
    const before = this.#stories.get(key) ?? Promise.resolve();
    let end!: () => void;
    const mine = new Promise<void>((resolve) => (end = resolve));
    const last = before.then(() => mine);
    this.#stories.set(key, last);
    return before.then(() => () => {
      end();
      if (this.#stories.get(key) === last) this.#stories.delete(key);
    });
  }

  /** publishInTurn publishes m once its story's earlier messages are done. */
  async #publishInTurn(m: Message, options: PublishOptions): Promise<Result> {
    const prev = this.#refused.get(m.id, this.#clock.now());
    if (prev && prev.sum === sum(m)) {
      const e = cloneError(prev.error);
      e.attempts = 0;
      e.notResent = true;
      e.kept = false;
      e.outboxEntry = "";
      throw e;
    }
    // An outbox that cannot be read holds nothing back: the message is sent.
    const kept = this.#outbox ? await this.#outbox.pending(m.key).catch(() => []) : [];
    if (this.#outbox && kept.length > 0) {
      // The story has messages kept from before: they go first.
      const { blocked } = await this.#drain(this.#outbox, m.key, options);
      if (blocked) {
        const e = new StorybusError({ messageId: m.id, messageType: m.type, snapshot: m.snapshot, cause: new HeldError() });
        throw await this.#keep(m, e);
      }
    }
    const { result, error } = await this.#send(m, options);
    if (result) return result;
    const e = error!;
    if (e.refused()) {
      this.#refusal(m, e);
      throw e;
    }
    await this.#keep(m, e);
    if (e.needsAlert()) this.#o.onAlert?.(e);
    throw e;
  }

  /** refusal handles a final refusal: remember a refused snapshot, alert. */
  #refusal(m: Message, e: StorybusError): void {
    if (e.status === 409 && m.snapshot && m.id !== "") {
      this.#refused.add(m.id, { sum: sum(m), error: e }, this.#clock.now());
    }
    if (e.needsAlert()) this.#o.onAlert?.(e);
  }

  /** keep puts a message without a final answer in the outbox. */
  async #keep(m: Message, e: StorybusError): Promise<StorybusError> {
    if (!this.#outbox) return e;
    // The entry's reason says it is kept.
    e.kept = true;
    try {
      const entry = await this.#outbox.put(m, e, this.#clock.now());
      e.outboxEntry = entry.id;
    } catch (err) {
      e.kept = false;
      e.cause = new AggregateError([e.cause, err].filter((c) => c !== undefined), "keeping it in the outbox failed", {
        cause: err,
      });
    }
    return e;
  }

  /**
   * send runs the attempts for one message until a final answer, or until
   * the retries are exhausted.
   */
  async #send(m: Message, options: PublishOptions): Promise<{ result?: Result; error?: StorybusError }> {
    let refreshed = false;
    let retries = 0; // retryable failures so far
    let sends = 0;
    const signal = options.signal;
    const fail = (e: StorybusError) => {
      e.messageId = m.id;
      e.messageType = m.type;
      e.attempts = sends;
      e.snapshot = m.snapshot;
      return { error: e };
    };
    for (;;) {
      if (signal?.aborted) return fail(new StorybusError({ cause: new NoAnswerError(signal.reason) }));
      const { answer, token, error } = await this.#attempt(m, sends + 1, options);
      if (token !== "") sends++; // sent, whether or not an answer came
      if (answer && answer.status >= 200 && answer.status < 300) {
        const j = answer.json;
        return {
          result: {
            messageId: m.id,
            messageType: m.type,
            family: typeof j.family === "string" ? j.family : "",
            status: answer.status,
            duplicate: j.duplicate === true,
            tolerated: Array.isArray(j.tolerated) ? j.tolerated : [],
            attempts: sends,
          },
        };
      }
      const e = error ?? failure(answer!, this.#clock.now());
      if (signal?.aborted && e.status === 0) {
        return fail(new StorybusError({ cause: new NoAnswerError(signal.reason) }));
      }
      if (e.status === 401 && !refreshed && token !== "") {
        // Once, with a fresh token, at once.
        this.#tokens.invalidate(token);
        refreshed = true;
        continue;
      }
      if (e.status === 401 || !e.temporary()) return fail(e);
      retries++;
      if (retries >= this.#retry.attempts) return fail(e);
      if (e.retryAfterMs > this.#retry.maxRetryAfterMs) return fail(e);
      const wait = Math.max(backoff(this.#retry, retries, this.#jitter()), e.retryAfterMs);
      try {
        await this.#clock.sleep(wait, signal);
      } catch (err) {
        e.cause = err;
        return fail(e);
      }
    }
  }

  /**
   * attempt sends m once. It returns the answer, or an error when there was
   * none (or the token could not be had), and the token it used.
   */
  async #attempt(m: Message, n: number, options: PublishOptions): Promise<Attempt> {
    let token: string;
    try {
      token = await this.#tokens.token(options.signal);
    } catch (err) {
      return { token: "", error: asError(err) ?? noAnswer(err) };
    }
    const headers: Record<string, string> = {
      Authorization: `Bearer ${token}`,
      ...traceHeaders(options.trace ?? this.#o.traceContext?.()),
    };
    const option = this.#o.sandboxAnswer;
    const sandbox = options.sandboxAnswer ?? (typeof option === "function" ? option(n, m) : option);
    if (sandbox) headers[SANDBOX_ANSWER_HEADER] = sandbox;
    const t = withTimeout(options.signal, this.#timeoutMs);
    try {
      const answer = await this.#endpoint.do({ method: "POST", path: "/messages", body: m.bytes(), headers }, t.signal);
      return { answer, token };
    } catch (err) {
      return { token, error: noAnswer(err) };
    } finally {
      t.clear();
    }
  }

  /**
   * drain resends one story's pending entries in order, in the story's
   * turn. It reports whether entries remain pending.
   */
  async #drain(outbox: Outbox, key: string, options: PublishOptions): Promise<{ results: ResendResult[]; blocked: boolean }> {
    let entries: Entry[];
    try {
      entries = await outbox.pending(key);
    } catch {
      return { results: [], blocked: true };
    }
    const results: ResendResult[] = [];
    for (const [i, entry] of entries.entries()) {
      let m: Message;
      try {
        m = Message.parse(entry.message);
      } catch (err) {
        // Kept bytes that are not a JSON object cannot be sent.
        await outbox.refuse(entry, err as Error).catch(() => undefined);
        results.push({ entry, error: err as Error });
        continue;
      }
      const { result, error } = await this.#send(m, options);
      if (result) {
        try {
          await outbox.remove(entry.id);
        } catch (err) {
          results.push({ entry, result, error: err as Error });
          return { results, blocked: true };
        }
        results.push({ entry, result });
        continue;
      }
      const e = error!;
      if (e.refused()) {
        this.#refusal(m, e);
        const moved = await outbox.refuse(entry, e).catch(() => entry);
        results.push({ entry: moved, error: e });
        continue;
      }
      await outbox.update(entry, e).catch(() => undefined);
      e.kept = true;
      e.outboxEntry = entry.id;
      if (e.needsAlert()) this.#o.onAlert?.(e);
      results.push({ entry, error: e });
      for (const later of entries.slice(i + 1)) {
        results.push({
          entry: later,
          error: new StorybusError({
            messageId: later.messageId,
            messageType: later.messageType,
            kept: true,
            outboxEntry: later.id,
            cause: new HeldError(),
          }),
        });
      }
      return { results, blocked: true };
    }
    return { results, blocked: false };
  }
}

/** sum is the SHA-256 of a message's bytes. */
function sum(m: Message): string {
  return createHash("sha256").update(m.bytes()).digest("hex");
}

function cloneError(e: StorybusError): StorybusError {
  return new StorybusError({
    status: e.status,
    rule: e.rule,
    violations: e.violations,
    text: e.text,
    oauth2: e.oauth2,
    retryAfterMs: e.retryAfterMs,
    requestId: e.requestId,
    messageId: e.messageId,
    messageType: e.messageType,
    attempts: e.attempts,
    kept: e.kept,
    outboxEntry: e.outboxEntry,
    notResent: e.notResent,
    snapshot: e.snapshot,
    cause: e.cause,
  });
}
