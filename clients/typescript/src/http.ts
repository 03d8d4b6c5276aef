import { isCertificateError, NoAnswerError, StorybusError, UntrustedCertificateError } from "./errors.js";
import type { Violation } from "./wire.js";

/**
 * FetchLike is the transport the client sends its requests with: the
 * global fetch of Node.js, or any function that takes fetch's arguments
 * and returns a Response (tlsFetch, for a private CA or a client
 * certificate; a test's wrapper). The client calls it with a string URL
 * and an init whose headers are a plain object.
 */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

/**
 * TraceContext is a W3C trace context (traceparent and tracestate headers),
 * passed through to the bus so that the caller's trace continues through
 * the bus to the consumers.
 */
export interface TraceContext {
  /** traceparent is the W3C traceparent header value. */
  traceparent?: string;
  /** tracestate is the W3C tracestate header value, sent only beside a valid traceparent. */
  tracestate?: string;
}

/** maxAnswerBytes bounds the answers the client reads: a pull of 100 messages of 240,000 bytes fits. */
const maxAnswerBytes = 32 << 20;

const traceparentPattern = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/**
 * traceHeaders returns the headers of a trace context, as W3C's propagator
 * injects them: nothing for a traceparent that is malformed, of version ff,
 * or with an all-zero trace or span id.
 */
export function traceHeaders(trace: TraceContext | undefined): Record<string, string> {
  const tp = trace?.traceparent?.trim().toLowerCase();
  if (!tp || !traceparentPattern.test(tp)) return {};
  const [version, traceId, spanId] = tp.split("-");
  if (version === "ff" || /^0+$/.test(traceId ?? "") || /^0+$/.test(spanId ?? "")) return {};
  const h: Record<string, string> = { traceparent: tp };
  const ts = trace?.tracestate?.trim();
  if (ts) h.tracestate = ts;
  return h;
}

/** Answer is one answer of the bus, in any of its documented shapes. */
export interface Answer {
  status: number;
  headers: Headers;
  /** body is the answer's text. */
  body: string;
  /** json is the body parsed, or {} for an answer that is not a JSON object. */
  json: AnswerBody;
}

/** AnswerBody holds the members of every answer shape the client reads. */
export interface AnswerBody {
  accepted?: boolean;
  duplicate?: boolean;
  message_id?: string;
  message_type?: string;
  family?: string;
  tolerated?: Violation[];
  violations?: Violation[];
  message?: string;
  /** error, error_description and rule are the token endpoint's OAuth2 error and the rule behind it. */
  error?: string;
  error_description?: string;
  rule?: string;
}

/** Request is one HTTP exchange with a workspace. */
export interface Request {
  method: "GET" | "POST";
  /** path follows /v1/tenants/{t}. */
  path: string;
  body?: Uint8Array | string;
  contentType?: string;
  headers?: Record<string, string>;
}

/** Endpoint is one workspace of one bus. */
export class Endpoint {
  /** base is the bus URL followed by /v1/tenants/{t}. */
  readonly base: string;
  private readonly fetch: FetchLike;

  constructor(url: string, workspace: string, fetch?: FetchLike) {
    if (!url || !workspace) throw new TypeError("storybus: the bus URL and the workspace are required");
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new TypeError(`storybus: bus URL ${JSON.stringify(url)} is not an http(s) URL`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
      throw new TypeError(`storybus: bus URL ${JSON.stringify(url)} is not an http(s) URL`);
    }
    this.base = `${url.replace(/\/+$/, "")}/v1/tenants/${encodeURIComponent(workspace)}`;
    this.fetch = fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  /**
   * do sends r and returns the answer; it throws when there was none (the
   * fetch's error: a network error, an abort).
   */
  async do(r: Request, signal: AbortSignal | undefined): Promise<Answer> {
    const headers: Record<string, string> = { Accept: "application/json", ...r.headers };
    if (r.body !== undefined) headers["Content-Type"] = r.contentType ?? "application/json";
    const init: RequestInit = { method: r.method, headers };
    if (r.body !== undefined) init.body = r.body;
    if (signal) init.signal = signal;
    const res = await this.fetch(this.base + r.path, init);
    const body = await readLimited(res);
    let json: AnswerBody = {};
    try {
      const v: unknown = JSON.parse(body);
      // An answer that is not JSON (a proxy's error page) is judged by its
      // status alone.
      if (v !== null && typeof v === "object" && !Array.isArray(v)) json = v as AnswerBody;
    } catch {
      // not JSON
    }
    return { status: res.status, headers: res.headers, body, json };
  }
}

/** readLimited reads an answer's text, at most maxAnswerBytes of it. */
async function readLimited(res: Response): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.byteLength;
    if (size >= maxAnswerBytes) {
      await reader.cancel();
      break;
    }
  }
  return Buffer.concat(chunks).subarray(0, maxAnswerBytes).toString("utf8");
}

/** failure turns an answer that is not a success into a StorybusError. */
export function failure(a: Answer, now: Date): StorybusError {
  const j = a.json;
  const violations = Array.isArray(j.violations) ? j.violations : [];
  const e = new StorybusError({
    status: a.status,
    violations,
    text: typeof j.message === "string" ? j.message : "",
    retryAfterMs: retryAfter(a.headers.get("Retry-After"), now),
    requestId: a.headers.get("X-Request-Id") ?? "",
    oauth2: typeof j.error === "string" ? j.error : "",
    rule: typeof j.rule === "string" ? j.rule : "",
  });
  const first = violations[0];
  if (first && typeof first.rule === "string") e.rule = first.rule;
  if (e.oauth2 !== "") e.text = typeof j.error_description === "string" ? j.error_description : "";
  return e;
}

/**
 * noAnswer is the StorybusError of an exchange that got no answer. A bus
 * certificate the client does not trust is told apart: it is
 * configuration, not a failure a retry can fix.
 */
export function noAnswer(err: unknown): StorybusError {
  if (isCertificateError(err)) return new StorybusError({ cause: new UntrustedCertificateError(err) });
  return new StorybusError({ cause: new NoAnswerError(err) });
}

/** retryAfter reads a Retry-After value, in seconds or as an HTTP date, into milliseconds. */
export function retryAfter(value: string | null, now: Date): number {
  const v = value?.trim() ?? "";
  if (v === "") return 0;
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const t = Date.parse(v);
  if (!Number.isNaN(t) && t > now.getTime()) return t - now.getTime();
  return 0;
}

/**
 * withTimeout returns a signal that aborts when signal does or after ms,
 * and a function that releases its timer.
 */
export function withTimeout(signal: AbortSignal | undefined, ms: number): { signal: AbortSignal; clear: () => void } {
  const c = new AbortController();
  const onAbort = () => c.abort(signal?.reason);
  const timer = setTimeout(
    () => c.abort(new DOMException(`the attempt timed out after ${ms} ms`, "TimeoutError")),
    ms,
  );
  if (signal?.aborted) onAbort();
  else signal?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: c.signal,
    clear: () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    },
  };
}

/** formatDuration writes milliseconds as a Go duration the bus reads: 20s, 500ms. */
export function formatDuration(ms: number): string {
  const whole = Math.max(0, Math.round(ms));
  return whole % 1000 === 0 ? `${whole / 1000}s` : `${whole}ms`;
}
