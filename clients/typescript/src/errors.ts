import type { Violation } from "./wire.js";

// Rule ids the client acts on. Every rule the bus answers with is in the
// bus's rule catalogue (docs/rules.md); a program branches on
// StorybusError.rule, never on the text of a message.

/** RULE_MESSAGE_TOO_LARGE: 413, a message over 240,000 bytes. */
export const RULE_MESSAGE_TOO_LARGE = "message.too_large";
/** RULE_MESSAGE_NOT_JSON: 400, a body that is not one JSON object. */
export const RULE_MESSAGE_NOT_JSON = "message.not_json";
/** RULE_REQUEST_BLOCKED: 403, refused by the workspace's firewall. */
export const RULE_REQUEST_BLOCKED = "request.blocked";
/** RULE_MESSAGE_ID_REUSED: 409, a message_id used for another message. */
export const RULE_MESSAGE_ID_REUSED = "message_id.reused";
/** RULE_MESSAGE_IN_FLIGHT: 503, an earlier attempt is not confirmed yet. */
export const RULE_MESSAGE_IN_FLIGHT = "message.in_flight";
/** RULE_SUPERSEDED: 409, a recorded snapshot a newer one supersedes. */
export const RULE_SUPERSEDED = "message.superseded";
/** RULE_SEQUENCE_STALE: 409, a snapshot not newer than the story's latest. */
export const RULE_SEQUENCE_STALE = "sequence.stale";
/** RULE_SEQUENCE_TERMINAL: 409, a snapshot of a killed story. */
export const RULE_SEQUENCE_TERMINAL = "sequence.terminal";
/** RULE_STORY_NOT_OWNER: 409, a story another system owns. */
export const RULE_STORY_NOT_OWNER = "story.not_owner";
/** RULE_COMMIT_CONTENTION: 409, another writer changed the story at the same moment. */
export const RULE_COMMIT_CONTENTION = "commit.contention";
/** RULE_RATE_LIMITED: 429, over the connection's rate limit. */
export const RULE_RATE_LIMITED = "rate.limited";
/** RULE_QUOTA_EXCEEDED: 429, over the connection's daily quota. */
export const RULE_QUOTA_EXCEEDED = "quota.exceeded";

/**
 * OAUTH2_UNAUTHORIZED_CLIENT is the token endpoint's OAuth2 error for a
 * connection that may not get tokens (connection.inactive): 400 by RFC
 * 6749, but configuration, not a bug.
 */
export const OAUTH2_UNAUTHORIZED_CLIENT = "unauthorized_client";

/**
 * NoAnswerError is the cause of a StorybusError for an attempt that got no
 * answer the client could read: a timeout, a network error or a cut
 * connection. Its own cause is the network error.
 */
export class NoAnswerError extends Error {
  override name = "NoAnswerError";
  constructor(cause?: unknown) {
    super(cause === undefined ? "no answer from the bus" : `no answer from the bus: ${describe(cause)}`, { cause });
  }
}

/**
 * UntrustedCertificateError is the cause of a StorybusError for a request
 * that got no answer because the bus's TLS certificate is not trusted: it
 * does not chain to the trusted roots (TLSFiles.caFile, or Node's), names
 * another host, or has expired. That is configuration, never retried: the
 * same certificate is refused on every attempt. A message is kept in the
 * outbox, since the bus never judged it. Its cause is the TLS error.
 */
export class UntrustedCertificateError extends Error {
  override name = "UntrustedCertificateError";
  constructor(cause: unknown) {
    super(`the bus's TLS certificate is not trusted: ${describe(cause)}`, { cause });
  }
}

/** The codes of Node's TLS errors for a certificate it does not trust. */
const untrustedCodes = new Set([
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_SIGNATURE_FAILURE",
  "CERT_NOT_YET_VALID",
  "CERT_HAS_EXPIRED",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "HOSTNAME_MISMATCH",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

/** isCertificateError reports whether err, or an error in its chain of causes, is Node's refusal of a certificate. */
export function isCertificateError(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 32; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && untrustedCodes.has(code)) return true;
    e = e.cause;
  }
  return false;
}

/**
 * HeldError is the cause of a StorybusError for a message that was not sent
 * because an earlier message of its story is kept in the outbox and could
 * not be delivered first: it is kept behind that one, in order.
 */
export class HeldError extends Error {
  override name = "HeldError";
  constructor() {
    super("held behind an earlier message of its story kept in the outbox");
  }
}

/**
 * ErrorClass is the class of a failure in the terms a newsroom user sees,
 * the classes of the documentation's "Show it to people":
 *
 * - `invalid`: 400 and 413, or a reused message_id. A bug in the producing
 *   product.
 * - `not-allowed`: 401 after a fresh token, 403, a connection that may not
 *   get tokens (unauthorized_client), a story owned by another system, or
 *   a bus certificate the client does not trust. For an administrator.
 * - `story-changed`: a snapshot refused as stale, contended or superseded.
 * - `story-killed`: a snapshot of a killed story.
 * - `not-delivered`: retries exhausted (timeouts, network errors, 429,
 *   5xx); the message is kept for a later resend.
 * - `none`: success or an unclassified failure.
 */
export type ErrorClass = "none" | "invalid" | "not-allowed" | "story-changed" | "story-killed" | "not-delivered";

/** StorybusErrorInit holds the fields of a new StorybusError. */
export interface StorybusErrorInit {
  /** status: StorybusError.status. */
  status?: number;
  /** rule: StorybusError.rule. */
  rule?: string;
  /** violations: StorybusError.violations. */
  violations?: Violation[];
  /** text: StorybusError.text. */
  text?: string;
  /** oauth2: StorybusError.oauth2. */
  oauth2?: string;
  /** retryAfterMs: StorybusError.retryAfterMs. */
  retryAfterMs?: number;
  /** requestId: StorybusError.requestId. */
  requestId?: string;
  /** messageId: StorybusError.messageId. */
  messageId?: string;
  /** messageType: StorybusError.messageType. */
  messageType?: string;
  /** attempts: StorybusError.attempts. */
  attempts?: number;
  /** kept: StorybusError.kept. */
  kept?: boolean;
  /** outboxEntry: StorybusError.outboxEntry. */
  outboxEntry?: string;
  /** notResent: StorybusError.notResent. */
  notResent?: boolean;
  /** snapshot: StorybusError.snapshot. */
  snapshot?: boolean;
  /** cause: StorybusError.cause. */
  cause?: unknown;
}

/**
 * StorybusError is a publish, token or consumer request that did not
 * succeed. It carries the bus's answer (status, rule, violations) or, when
 * there was no answer, the cause. Branch on status and rule, never on the
 * text of a message: the client itself never reads it.
 */
export class StorybusError extends Error {
  override name = "StorybusError";
  /** status is the HTTP status of the last answer; 0 when there was none. */
  status: number;
  /** rule is the first violation's rule, "" when the answer had none. */
  rule: string;
  /** violations are the answer's violations, every one of them. */
  violations: Violation[];
  /**
   * text is the message of an answer in API Gateway's {"message":"…"}
   * shape (an unknown path), or the error_description of the token
   * endpoint's OAuth2 error: for people.
   */
  text: string;
  /**
   * oauth2 is the error code of the token endpoint's OAuth2 error (RFC 6749
   * §5.2: invalid_client, unauthorized_client, …); rule is the catalogued
   * rule beside it.
   */
  oauth2: string;
  /** retryAfterMs is the answer's Retry-After in milliseconds, 0 without one. */
  retryAfterMs: number;
  /**
   * requestId is the last answer's X-Request-Id: quote it to the bus's
   * operators when a failure persists; they find the request by it.
   */
  requestId: string;
  /** messageId identifies the message, for a publish. */
  messageId: string;
  /** messageType is the message's message_type, for a publish. */
  messageType: string;
  /** attempts is how many times the message was sent by this call. */
  attempts: number;
  /** kept is set when the message is in the outbox, unchanged, for a later resend. */
  kept: boolean;
  /** outboxEntry is the id of the message's outbox entry when it is kept. */
  outboxEntry: string;
  /**
   * notResent is set when the client refused to send the message again
   * because the bus already refused it with 409.
   */
  notResent: boolean;
  /** snapshot is set when the message is a story.context snapshot. */
  snapshot: boolean;
  /**
   * cause is the cause when there was no final answer: a NoAnswerError
   * (whose cause is the network error or the abort reason of the caller's
   * signal), an UntrustedCertificateError, or a HeldError.
   */
  declare cause: unknown;

  constructor(init: StorybusErrorInit = {}) {
    super("", init.cause === undefined ? undefined : { cause: init.cause });
    this.status = init.status ?? 0;
    this.rule = init.rule ?? "";
    this.violations = init.violations ?? [];
    this.text = init.text ?? "";
    this.oauth2 = init.oauth2 ?? "";
    this.retryAfterMs = init.retryAfterMs ?? 0;
    this.requestId = init.requestId ?? "";
    this.messageId = init.messageId ?? "";
    this.messageType = init.messageType ?? "";
    this.attempts = init.attempts ?? 0;
    this.kept = init.kept ?? false;
    this.outboxEntry = init.outboxEntry ?? "";
    this.notResent = init.notResent ?? false;
    this.snapshot = init.snapshot ?? false;
    // The message says what the fields say now: the client fills some of
    // them in after the answer (attempts, kept).
    Object.defineProperty(this, "message", { get: () => this.describe(), enumerable: false, configurable: true });
  }

  /**
   * describe says what happened and what to do, in one line; it is the
   * error's message.
   */
  describe(): string {
    let s = this.messageId !== "" ? `message ${this.messageId}: ` : "";
    if (this.status !== 0) {
      s += String(this.status);
      if (this.rule !== "") s += ` ${this.rule}`;
      if (this.oauth2 !== "") s += ` (OAuth2 ${this.oauth2})`;
      const path = this.violations[0]?.path;
      if (path) s += ` at ${path}`;
      // The bus's own explanation, for people: the text of an OAuth2 error
      // or of API Gateway's shape, else the first violation's message.
      const text = this.text !== "" ? this.text : (this.violations[0]?.message ?? "");
      if (text !== "") s += ` ${JSON.stringify(text)}`;
    } else if (this.cause !== undefined) {
      s += describe(this.cause);
    } else {
      s += "failed";
    }
    if (this.attempts > 1) s += ` after ${this.attempts} attempts`;
    const advice = this.advice();
    if (advice !== "") s += `: ${advice}`;
    return s;
  }

  /**
   * refused reports whether the bus gave a final verdict against this
   * message: resending it unchanged cannot help (400, 403, 409, 413 and
   * every other 4xx but 401, 408 and 429).
   */
  refused(): boolean {
    return this.status >= 400 && this.status < 500 && !retryableStatus(this.status) && this.status !== 401;
  }

  /**
   * temporary reports whether the failure is of the kind a later resend can
   * fix: no answer, 408, 429 or 5xx. A certificate the client does not
   * trust is not: it is configuration (UntrustedCertificateError).
   */
  temporary(): boolean {
    return (this.status === 0 && this.cause !== undefined && !this.#untrusted()) || retryableStatus(this.status);
  }

  /** untrusted reports whether the cause is a bus certificate the client does not trust. */
  #untrusted(): boolean {
    return this.status === 0 && this.cause instanceof UntrustedCertificateError;
  }

  /**
   * rebuild reports whether the answer asks for a new snapshot, built from
   * the story's current state with the next sequence_number and a new
   * message_id: a snapshot refused with 409 sequence.stale or
   * commit.contention.
   */
  rebuild(): boolean {
    return (
      this.status === 409 &&
      this.snapshot &&
      (this.rule === RULE_SEQUENCE_STALE || this.rule === RULE_COMMIT_CONTENTION)
    );
  }

  /**
   * needsAlert reports whether a person must act: a bug in the producing
   * product (400, 413, a reused message_id) or configuration (a 401 after a
   * fresh token, 403, a bus certificate the client does not trust).
   */
  needsAlert(): boolean {
    return (
      this.#untrusted() ||
      this.status === 400 ||
      this.status === 413 ||
      this.status === 401 ||
      this.status === 403 ||
      (this.status === 409 && this.rule === RULE_MESSAGE_ID_REUSED)
    );
  }

  /** advice says what the producer should do next, for logs. */
  advice(): string {
    const s = this.status;
    if (this.#untrusted()) {
      const advice =
        "configuration: give the client the CA that signed the bus's certificate (tlsFetch's caFile) or fix the certificate; not retried";
      return this.kept ? `${advice}; kept in the outbox for a later resend` : advice;
    }
    if (this.oauth2 === OAUTH2_UNAUTHORIZED_CLIENT) {
      return "configuration: the connection may not get tokens; alert an administrator";
    }
    if (this.oauth2 !== "" && s === 400) return "a bug in the token request: the bus refuses it";
    if (this.oauth2 !== "" && s === 401) return "configuration: the client id or secret is not accepted; stop and alert";
    if (s === 409 && this.snapshot) {
      const not = this.notResent ? "it was refused before and was not sent again" : "it is not resent";
      switch (this.rule) {
        case RULE_SEQUENCE_TERMINAL:
          return `${not}; the story is killed and stays killed: tell the user`;
        case RULE_STORY_NOT_OWNER:
          return `${not}; publish from the story's owner or ask a workspace admin for a hand-off`;
        case RULE_MESSAGE_ID_REUSED:
          return `${not}; a bug: every new message needs a new message_id`;
        case RULE_SUPERSEDED:
          return `${not}; a newer snapshot supersedes it: for a change, rebuild a complete snapshot from current state with a new message_id`;
      }
      return `${not}; rebuild a complete snapshot from current state, with the next sequence_number and a new message_id`;
    }
    if (s === 409 && this.rule === RULE_MESSAGE_ID_REUSED) {
      return "a bug: every new message needs a new message_id; it is not resent";
    }
    if (s === 409) return "refused for this message; it is not resent";
    if (s === 400) {
      return "a bug in the producing product: fix the message at the rule's path; it is not resent unchanged";
    }
    if (s === 413) return "send content by reference: move media and long text out; it is not resent";
    if (s === 401) return "configuration: refused even with a fresh token; stop and alert";
    if (s === 403 && this.rule === RULE_REQUEST_BLOCKED) {
      return "refused by the workspace firewall: check what the client sends";
    }
    if (s === 403) return "configuration: alert an administrator";
    if (this.temporary()) {
      if (this.kept) return "not delivered yet; kept in the outbox for a later resend";
      if (this.messageId !== "") return "not delivered yet, and not kept: no outbox";
      return "temporary: retry later";
    }
    if (this.refused()) return "refused; it is not resent";
    return "";
  }

  /** class returns the failure's user-facing class. */
  class(): ErrorClass {
    const s = this.status;
    if (this.oauth2 === OAUTH2_UNAUTHORIZED_CLIENT || this.#untrusted()) return "not-allowed";
    if (s === 400 || s === 413) return "invalid";
    if (s === 401 || s === 403) return "not-allowed";
    if (s === 409) {
      switch (this.rule) {
        case RULE_SEQUENCE_STALE:
        case RULE_COMMIT_CONTENTION:
        case RULE_SUPERSEDED:
          return "story-changed";
        case RULE_SEQUENCE_TERMINAL:
          return "story-killed";
        case RULE_MESSAGE_ID_REUSED:
          return "invalid";
      }
      return "not-allowed";
    }
    if (this.temporary()) return "not-delivered";
    if (this.refused()) return "invalid";
    return "none";
  }

  /**
   * userMessage returns what a newsroom user should read, never a status
   * code: the documentation's sentence for the class, pointing at the field
   * for an invalid message.
   */
  userMessage(): string {
    switch (this.class()) {
      case "invalid": {
        if (this.status === 413) return "This story couldn't be shared with other systems: it is too large.";
        const path = this.violations[0]?.path;
        const field = path ? fieldName(path) : "the message";
        return `This story couldn't be shared with other systems: ${field} is invalid.`;
      }
      case "not-allowed":
        return "This system isn't allowed to publish that.";
      case "story-changed":
        return "Someone else changed this story.";
      case "story-killed":
        return "This story was killed and can't be reopened.";
      case "not-delivered":
        return "Other systems haven't received the latest version yet. Retrying.";
    }
    return "";
  }
}

/** fieldName turns a JSON Pointer into a dotted field name. */
function fieldName(pointer: string): string {
  return pointer
    .replace(/^\//, "")
    .split("/")
    .map((t) => t.replaceAll("~1", "/").replaceAll("~0", "~"))
    .join(".");
}

/** describe returns an error's text on one line, with its causes. */
function describe(err: unknown): string {
  if (err instanceof Error) {
    const own = err.message.replaceAll("\n", ": ");
    if (err instanceof NoAnswerError || err instanceof UntrustedCertificateError || err.cause === undefined) return own;
    return `${own}: ${describe(err.cause)}`;
  }
  return String(err);
}

/** retryableStatus reports the statuses the client retries: 408 (a timeout), 429 and 5xx. */
export function retryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/** asError returns the StorybusError err is, or that is in its chain of causes. */
export function asError(err: unknown): StorybusError | undefined {
  for (let e = err, depth = 0; e !== undefined && e !== null && depth < 32; depth++) {
    if (e instanceof StorybusError) return e;
    e = e instanceof Error ? e.cause : undefined;
  }
  return undefined;
}

/** statusOf returns the HTTP status of the answer behind err, or 0. */
export function statusOf(err: unknown): number {
  return asError(err)?.status ?? 0;
}

/** ruleOf returns the rule of the answer behind err, or "". */
export function ruleOf(err: unknown): string {
  return asError(err)?.rule ?? "";
}

/** hasRule reports whether any violation of the answer behind err is rule. */
export function hasRule(err: unknown, rule: string): boolean {
  return asError(err)?.violations.some((v) => v.rule === rule) ?? false;
}

/** isRefused reports whether err is a final refusal of the message: never resend it unchanged. */
export function isRefused(err: unknown): boolean {
  return asError(err)?.refused() ?? false;
}

/** isKept reports whether err's message is kept in the outbox. */
export function isKept(err: unknown): boolean {
  return asError(err)?.kept ?? false;
}

/**
 * needsRebuild reports whether err asks for a new snapshot built from the
 * story's current state with a new message_id.
 */
export function needsRebuild(err: unknown): boolean {
  return asError(err)?.rebuild() ?? false;
}

/** isNoAnswer reports whether err is a failure that got no answer from the bus. */
export function isNoAnswer(err: unknown): boolean {
  return asError(err)?.cause instanceof NoAnswerError;
}

/** isHeld reports whether err's message was held behind an earlier kept message of its story. */
export function isHeld(err: unknown): boolean {
  return asError(err)?.cause instanceof HeldError;
}

/** isUntrustedCertificate reports whether err got no answer because the bus's certificate is not trusted. */
export function isUntrustedCertificate(err: unknown): boolean {
  return asError(err)?.cause instanceof UntrustedCertificateError;
}
