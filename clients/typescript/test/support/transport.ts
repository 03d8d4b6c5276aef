// A recording transport and a clock that does not wait, for tests that
// provoke answers from the sandbox workspace of `storybus dev`.

import type { Clock, FetchLike } from "@storybus/client";

/** Sent is one request the recorder passed on. */
export interface Sent {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: Uint8Array;
  /** status is the answer's, 0 when there was none. */
  status: number;
}

/**
 * Recorder wraps a fetch: it sets the Storybus-Sandbox-Answer header of
 * each publish attempt from answerFor, and records every request.
 */
export class Recorder {
  readonly sent: Sent[] = [];
  /** answerFor returns the sandbox answer of the n-th publish attempt (from 0) of a body; "" for none. */
  answerFor: (n: number, body: Uint8Array) => string = () => "";
  readonly #next: FetchLike;

  constructor(next: FetchLike = (input, init) => globalThis.fetch(input, init)) {
    this.#next = next;
  }

  /** publishes returns the publish attempts so far. */
  publishes(): Sent[] {
    return this.sent.filter((s) => s.method === "POST" && s.url.endsWith("/messages"));
  }

  /** tokenRequests returns the token requests so far. */
  tokenRequests(): Sent[] {
    return this.sent.filter((s) => s.method === "POST" && s.url.endsWith("/tokens"));
  }

  /** fetch is the wrapped fetch, to give the client. */
  readonly fetch: FetchLike = async (input, init) => {
    const headers: Record<string, string> = { ...(init.headers as Record<string, string>) };
    const body =
      init.body === undefined || init.body === null
        ? new Uint8Array()
        : typeof init.body === "string"
          ? new TextEncoder().encode(init.body)
          : Uint8Array.from(init.body as Uint8Array);
    const method = init.method ?? "GET";
    const sent: Sent = { method, url: input, headers, body, status: 0 };
    if (method === "POST" && input.endsWith("/messages")) {
      const n = this.publishes().length;
      const answer = this.answerFor(n, body);
      if (answer) headers["Storybus-Sandbox-Answer"] = answer;
    }
    this.sent.push(sent);
    const res = await this.#next(input, { ...init, headers });
    sent.status = res.status;
    return res;
  };
}

/** FakeClock is a Clock whose sleeps return at once, moving its time on and recording each wait. */
export class FakeClock implements Clock {
  #now: number;
  readonly waits: number[] = [];

  constructor(start = Date.now()) {
    this.#now = start;
  }

  now(): Date {
    return new Date(this.#now);
  }

  async sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) throw signal.reason;
    this.waits.push(ms);
    this.#now += Math.max(ms, 0);
  }
}
