import { randomUUID } from "node:crypto";
import type { AssetReferencePayload, StoryContextPayload, StoryEventPayload } from "./wire.js";

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: false });

/**
 * Message is one SOM message, serialised once. Every send, retry and
 * resend of it uses exactly these bytes, so that the bus recognises a
 * retry: a message rebuilt for a retry, with a new timestamp, would be a
 * different message under a reused message_id.
 */
export class Message {
  /** id is the message_id, "" when the message has none. */
  readonly id: string;
  /** type is the message_type, "" when the message has none. */
  readonly type: string;
  readonly #raw: Uint8Array;
  readonly #storyId: string;
  readonly #assetId: string;

  private constructor(raw: Uint8Array, id: string, type: string, storyId: string, assetId: string) {
    this.#raw = raw;
    this.id = id;
    this.type = type;
    this.#storyId = storyId;
    this.#assetId = assetId;
  }

  /**
   * parse wraps a serialised SOM message. It keeps a copy of raw and reads
   * the members the client needs (message_id, message_type, the story or
   * asset id); it does not validate the message, the bus does. It throws
   * a TypeError for bytes that are not one JSON object.
   */
  static parse(raw: Uint8Array | string): Message {
    const bytes = typeof raw === "string" ? encoder.encode(raw) : Uint8Array.from(raw);
    const text = decoder.decode(bytes);
    if (!text.trimStart().startsWith("{")) throw new TypeError("storybus: a SOM message is a JSON object");
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch (err) {
      throw new TypeError(`storybus: a SOM message is a JSON object: ${(err as Error).message}`);
    }
    // Members of unexpected types are the bus's to refuse; they read as "".
    const head = doc as Record<string, unknown>;
    const payload = (typeof head.payload === "object" && head.payload !== null ? head.payload : {}) as Record<
      string,
      unknown
    >;
    return new Message(bytes, str(head.message_id), str(head.message_type), str(payload.story_id), str(payload.asset_id));
  }

  /** bytes returns a copy of the serialised message. */
  bytes(): Uint8Array {
    return Uint8Array.from(this.#raw);
  }

  /** text returns the serialised message as a string. */
  text(): string {
    return decoder.decode(this.#raw);
  }

  /** snapshot reports whether the message is a story.context snapshot. */
  get snapshot(): boolean {
    return this.type === "story.context";
  }

  /**
   * key returns what orders the message among others: its story, for the
   * families that carry a story_id, else its asset, else the message alone.
   */
  get key(): string {
    if (this.#storyId !== "") return `story:${this.#storyId}`;
    if (this.#assetId !== "") return `asset:${this.#assetId}`;
    return `message:${this.id}`;
  }
}

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

/** EnvelopeBase holds what build needs of every message beside its type and payload. */
export interface EnvelopeBase {
  /**
   * messageId defaults to a new random UUID. Give a new one to every new
   * message, and never a new one to a retry.
   */
  messageId?: string;
  /** systemId is the producing system. */
  systemId: string;
  /** timestamp defaults to now. It is part of the content. */
  timestamp?: Date;
  /** correlationId is optional. */
  correlationId?: string;
}

/** Envelope is what build needs to make a message: a family's message type with its payload. */
export type Envelope =
  | (EnvelopeBase & { messageType: "story.context"; payload: StoryContextPayload })
  | (EnvelopeBase & { messageType: "story.event"; payload: StoryEventPayload })
  | (EnvelopeBase & { messageType: "asset.reference"; payload: AssetReferencePayload });

/**
 * build serialises a new SOM 1.0 message once. Keep the returned Message
 * until its final answer and resend only it.
 */
export function build(e: Envelope): Message {
  const doc: Record<string, unknown> = {
    som_version: "1.0",
    message_id: e.messageId || randomUUID(),
    message_type: e.messageType,
    system_id: e.systemId,
    timestamp: rfc3339(e.timestamp ?? new Date()),
  };
  if (e.correlationId) doc.correlation_id = e.correlationId;
  doc.payload = e.payload;
  return Message.parse(JSON.stringify(doc));
}

/** newMessage wraps a serialised SOM message: Message.parse. */
export function newMessage(raw: Uint8Array | string): Message {
  return Message.parse(raw);
}

/** rfc3339 writes a time in UTC as RFC 3339, without a fraction of zeros (as Go's RFC3339Nano). */
function rfc3339(t: Date): string {
  if (Number.isNaN(t.getTime())) throw new RangeError("storybus: the timestamp is not a valid date");
  return t.toISOString().replace(/\.(\d*?)0*Z$/, (_, frac: string) => (frac === "" ? "Z" : `.${frac}Z`));
}
