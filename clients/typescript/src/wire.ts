// The wire types of the publish and consumer APIs, from the types that
// openapi-typescript generates from docs/openapi.yaml into openapi.ts.

import type { components } from "./openapi.js";

type Schemas = components["schemas"];

/** MessageType is a SOM 1.0 message_type. */
export type MessageType = Schemas["MessageType"];
/** Family is the family a message_type belongs to, as the bus names it. */
export type Family = Schemas["Family"];
/** Violation is one entry of an answer's violations or tolerated list. */
export type Violation = Schemas["Violation"];
/** Accepted is the 202 answer of a publish. */
export type Accepted = Schemas["Accepted"];
/** Duplicate is the 200 answer to a message that was already published. */
export type Duplicate = Schemas["Duplicate"];
/** Refusal is the answer of every refusal of the publish and consumer routes. */
export type Refusal = Schemas["Refusal"];
/** TokenResponse is the token endpoint's OAuth2 client-credentials answer. */
export type TokenResponse = Schemas["TokenResponse"];
/** TokenError is the token endpoint's OAuth2 error (RFC 6749 §5.2). */
export type TokenError = Schemas["TokenError"];
/** AckRequest is the body of the consumer's ack route. */
export type AckRequest = Schemas["AckRequest"];
/** AckResponse is the answer of the consumer's ack route. */
export type AckResponse = Schemas["AckResponse"];

/** StoryContextPayload is the payload of a story.context snapshot. */
export type StoryContextPayload = Schemas["StoryContext"];
/** StoryEventPayload is the payload of a story.event message. */
export type StoryEventPayload = Schemas["StoryEvent"];
/** AssetReferencePayload is the payload of an asset.reference message. */
export type AssetReferencePayload = Schemas["AssetReference"];

/** StoryContextMessage is a whole story.context message. */
export type StoryContextMessage = Schemas["StoryContextMessage"];
/** StoryEventMessage is a whole story.event message. */
export type StoryEventMessage = Schemas["StoryEventMessage"];
/** AssetReferenceMessage is a whole asset.reference message. */
export type AssetReferenceMessage = Schemas["AssetReferenceMessage"];
/** SOMMessage is a whole SOM 1.0 message of any family, told apart by message_type. */
export type SOMMessage = Schemas["SOMMessage"];

/** SOMEnvelope is the envelope of every SOM 1.0 message, less its message_type and payload. */
export type SOMEnvelope = Omit<StoryContextMessage, "message_type" | "payload">;
