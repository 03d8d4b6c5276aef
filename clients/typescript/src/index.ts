/**
 * The storybus client for Node.js: it publishes SOM messages to a
 * workspace of a storybus bus with the retry discipline of the bus's
 * documentation for producers, so that a newsroom system loses no message
 * and never sends two messages about one change, and it consumes them
 * over the bus's HTTP pull API, de-duplicating on message_id.
 *
 * @module
 */

export { type Clock, systemClock } from "./clock.js";
export {
  Client,
  type Options,
  Pending,
  type PublishOptions,
  type ResendResult,
  type Result,
  SANDBOX_ANSWER_HEADER,
  SANDBOX_LOST,
} from "./client.js";
export {
  Consumer,
  type ConsumerOptions,
  type Delivery,
  type Handler,
  type HandlerContext,
  type RunOptions,
} from "./consumer.js";
export {
  DEFAULT_DEDUP_SIZE,
  DEFAULT_DEDUP_WINDOW_MS,
  Dedup,
  type DedupOptions,
  newDedup,
  openDedup,
} from "./dedup.js";
export {
  asError,
  type ErrorClass,
  HeldError,
  hasRule,
  isHeld,
  isKept,
  isNoAnswer,
  isRefused,
  isUntrustedCertificate,
  NoAnswerError,
  needsRebuild,
  OAUTH2_UNAUTHORIZED_CLIENT,
  RULE_COMMIT_CONTENTION,
  RULE_MESSAGE_ID_REUSED,
  RULE_MESSAGE_IN_FLIGHT,
  RULE_MESSAGE_NOT_JSON,
  RULE_MESSAGE_TOO_LARGE,
  RULE_QUOTA_EXCEEDED,
  RULE_RATE_LIMITED,
  RULE_REQUEST_BLOCKED,
  RULE_SEQUENCE_STALE,
  RULE_SEQUENCE_TERMINAL,
  RULE_STORY_NOT_OWNER,
  RULE_SUPERSEDED,
  ruleOf,
  statusOf,
  StorybusError,
  type StorybusErrorInit,
  UntrustedCertificateError,
} from "./errors.js";
export { type FetchLike, type TraceContext } from "./http.js";
export { build, type Envelope, type EnvelopeBase, Message, newMessage } from "./message.js";
export { type Entry, FileOutbox, type Outbox, openOutbox } from "./outbox.js";
export {
  backoff,
  defaultRetryPolicy,
  MIN_RETRY_WINDOW_MS,
  minTotalWait,
  type RetryPolicy,
  validateRetryPolicy,
} from "./retry.js";
export { tlsFetch, type TLSFiles } from "./tls.js";
export { ClientCredentials, type ClientCredentialsOptions, StaticToken, type TokenSource } from "./token.js";
export type {
  Accepted,
  AckRequest,
  AckResponse,
  AssetReferenceMessage,
  AssetReferencePayload,
  Duplicate,
  Family,
  MessageType,
  Refusal,
  SOMEnvelope,
  SOMMessage,
  StoryContextMessage,
  StoryContextPayload,
  StoryEventMessage,
  StoryEventPayload,
  TokenError,
  TokenResponse,
  Violation,
} from "./wire.js";
export type { components as OpenAPIComponents, paths as OpenAPIPaths } from "./openapi.js";
