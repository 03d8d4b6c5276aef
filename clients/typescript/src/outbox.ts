import { link, mkdir, open, readdir, readFile, rename, rm, rmdir, unlink } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import path from "node:path";
import type { StorybusError } from "./errors.js";
import type { Message } from "./message.js";

/** Entry is one message in an outbox. */
export interface Entry {
  /** id names the entry in its outbox. */
  id: string;
  /** messageId is the kept message's message_id. */
  messageId: string;
  /** messageType is the kept message's message_type. */
  messageType: string;
  /** key is the story (or asset) that orders the entry. */
  key: string;
  /** keptAt is when the message was first kept. */
  keptAt: Date;
  /** attempts counts every send of the message, over every resend. */
  attempts: number;
  /** status is the last answer's HTTP status, 0 when there was none. */
  status: number;
  /** rule is the last answer's rule, "" when there was none. */
  rule: string;
  /** reason is the last failure, for people. */
  reason: string;
  /** refused is set for an entry the bus refused on a resend. */
  refused: boolean;
  /** message is the message, byte for byte. */
  message: Uint8Array;
}

/**
 * Outbox keeps the messages the client could not deliver: their retries
 * were exhausted, the credentials were refused, or the caller gave up, so
 * the bus never judged them. Each is kept unchanged, byte for byte, until a
 * resend delivers it (Client.resend, or the next message of its story).
 * FileOutbox keeps them on disk; another store (a database table) can
 * implement this interface.
 */
export interface Outbox {
  /**
   * put keeps message, after its last failure (which may be undefined),
   * behind every message of its story already kept.
   */
  put(message: Message, cause: StorybusError | undefined, at: Date): Promise<Entry>;
  /** list returns the pending entries, oldest first. */
  list(): Promise<Entry[]>;
  /** pending returns the pending entries of one story (Message.key), in order. */
  pending(key: string): Promise<Entry[]>;
  /**
   * refused returns the entries the bus refused on a resend, oldest first.
   * They are never resent; an operator reads and removes them.
   */
  refused(): Promise<Entry[]>;
  /** get returns the entry with the id; it throws when there is none. */
  get(id: string): Promise<Entry>;
  /** remove deletes an entry; removing one that is gone is no error. */
  remove(id: string): Promise<void>;
  /** update records another failed resend of a pending entry. */
  update(entry: Entry, cause: StorybusError): Promise<void>;
  /** refuse moves an entry the bus refused to the refused entries and returns it there. */
  refuse(entry: Entry, cause: StorybusError | Error): Promise<Entry>;
}

const pendingDir = "pending";
const refusedDir = "refused";
const entryExt = ".msg";

/** EntryMeta is the first line of an entry file, as the Go client writes it too. */
interface EntryMeta {
  id: string;
  message_id: string;
  message_type: string;
  key: string;
  kept_at: string;
  attempts: number;
  status?: number;
  rule?: string;
  reason?: string;
  refused?: boolean;
}

/**
 * FileOutbox is an Outbox in a directory on disk. It survives a restart of
 * the process, and its layout is the Go client's and `storybus outbox`'s,
 * so either can list and resend what the other kept:
 *
 *     pending/<story>/<time>-<message_id>.msg   waiting for a resend, in story order
 *     refused/<time>-<message_id>.msg           refused by the bus on a resend
 *
 * A .msg file is one line of JSON metadata followed by the message's bytes.
 * Every file is written to a temporary name, synced and then linked into
 * place, so a crash never leaves half an entry.
 */
export class FileOutbox implements Outbox {
  /** dir is the outbox's directory. */
  readonly dir: string;

  private constructor(dir: string) {
    this.dir = dir;
  }

  /** open opens, or creates, the outbox in dir. */
  static async open(dir: string): Promise<FileOutbox> {
    if (!dir) throw new TypeError("storybus: the outbox needs a directory");
    for (const d of [pendingDir, refusedDir]) {
      await mkdir(path.join(dir, d), { recursive: true, mode: 0o700 });
    }
    return new FileOutbox(dir);
  }

  /** put keeps message behind every message of its story already kept. */
  async put(message: Message, cause: StorybusError | undefined, at: Date): Promise<Entry> {
    const e: Entry = {
      id: "",
      messageId: message.id,
      messageType: message.type,
      key: message.key,
      keptAt: new Date(at.getTime()),
      attempts: 0,
      status: 0,
      rule: "",
      reason: "",
      refused: false,
      message: message.bytes(),
    };
    record(e, cause);
    const keyDir = path.join(this.dir, pendingDir, encodeKey(e.key));
    for (let attempt = 0; ; attempt++) {
      await mkdir(keyDir, { recursive: true, mode: 0o700 });
      let stamp = BigInt(at.getTime()) * 1_000_000n;
      const last = await lastStamp(keyDir);
      if (stamp <= last) stamp = last + 1n;
      const name = `${stamp.toString().padStart(20, "0")}-${safeName(e.messageId)}${entryExt}`;
      e.id = `${pendingDir}/${encodeKey(e.key)}/${name}`;
      try {
        await writeEntry(path.join(keyDir, name), e, false);
        return e;
      } catch (err) {
        // Another writer took the name, or removed the story's emptied
        // directory meanwhile: try again.
        const code = (err as NodeJS.ErrnoException).code;
        if (attempt >= 10 || (code !== "EEXIST" && code !== "ENOENT")) {
          throw new Error(`storybus: outbox: ${(err as Error).message}`, { cause: err });
        }
      }
    }
  }

  /** list returns the pending entries, oldest first. */
  async list(): Promise<Entry[]> {
    const keys = await readdir(path.join(this.dir, pendingDir), { withFileTypes: true });
    const all: Entry[] = [];
    for (const k of keys) {
      if (k.isDirectory()) all.push(...(await this.#entries(`${pendingDir}/${k.name}`)));
    }
    return sortEntries(all);
  }

  /** pending returns the pending entries of one story, in order. */
  async pending(key: string): Promise<Entry[]> {
    return this.#entries(`${pendingDir}/${encodeKey(key)}`);
  }

  /** refused returns the entries the bus refused on a resend, oldest first. */
  async refused(): Promise<Entry[]> {
    return sortEntries(await this.#entries(refusedDir));
  }

  /** get returns the entry with the id. */
  async get(id: string): Promise<Entry> {
    return readEntry(this.#path(id), id);
  }

  /** remove deletes an entry, and the story's directory once it is empty. */
  async remove(id: string): Promise<void> {
    const p = this.#path(id);
    await rm(p, { force: true });
    const dir = path.dirname(p);
    if (path.basename(path.dirname(dir)) === pendingDir) {
      // Only when the story has no entry left.
      await rmdir(dir).catch(() => undefined);
    }
  }

  /** update records another failed resend of a pending entry, in place. */
  async update(entry: Entry, cause: StorybusError): Promise<void> {
    const e = { ...entry };
    record(e, cause);
    await writeEntry(this.#path(e.id), e, true);
  }

  /** refuse moves an entry to refused/ and returns it there. */
  async refuse(entry: Entry, cause: StorybusError | Error): Promise<Entry> {
    const old = entry.id;
    const e: Entry = { ...entry, refused: true, id: `${refusedDir}/${path.posix.basename(old)}` };
    record(e, cause);
    await writeEntry(this.#path(e.id), e, true);
    await this.remove(old);
    return e;
  }

  /** path resolves an entry id, refusing any that leaves the outbox. */
  #path(id: string): string {
    const clean = path.posix.normalize(id.replaceAll("\\", "/"));
    const parts = clean.split("/");
    const ok =
      clean.endsWith(entryExt) &&
      !parts.includes("..") &&
      ((parts.length === 3 && parts[0] === pendingDir) || (parts.length === 2 && parts[0] === refusedDir));
    if (!ok) throw new Error(`storybus: outbox: no entry ${JSON.stringify(id)}`);
    return path.join(this.dir, ...parts);
  }

  async #entries(rel: string): Promise<Entry[]> {
    const names = await entryNames(path.join(this.dir, ...rel.split("/")));
    const out: Entry[] = [];
    for (const n of names) {
      const id = `${rel}/${n}`;
      try {
        out.push(await readEntry(path.join(this.dir, ...id.split("/")), id));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") continue; // resent meanwhile
        throw err;
      }
    }
    return out;
  }
}

/** openOutbox opens, or creates, the file outbox in dir: FileOutbox.open. */
export function openOutbox(dir: string): Promise<FileOutbox> {
  return FileOutbox.open(dir);
}

function record(e: Entry, cause: StorybusError | Error | undefined): void {
  if (cause === undefined) return;
  const se = cause as Partial<StorybusError>;
  e.attempts += se.attempts ?? 0;
  e.status = se.status ?? 0;
  e.rule = se.rule ?? "";
  e.reason = cause.message;
}

/** entryNames lists a directory's entry files in order; a missing directory has none. */
async function entryNames(dir: string): Promise<string[]> {
  let des;
  try {
    des = await readdir(dir, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
  return des
    .filter((d) => !d.isDirectory() && d.name.endsWith(entryExt) && !d.name.startsWith("."))
    .map((d) => d.name)
    .sort(compare);
}

async function lastStamp(dir: string): Promise<bigint> {
  const names = await entryNames(dir);
  const last = names[names.length - 1];
  if (last === undefined) return 0n;
  const stamp = last.split("-", 1)[0] ?? "";
  return /^\d+$/.test(stamp) ? BigInt(stamp) : 0n;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function sortEntries(es: Entry[]): Entry[] {
  return es.sort((a, b) => compare(path.posix.basename(a.id), path.posix.basename(b.id)));
}

/**
 * writeEntry writes an entry durably: a temporary file, synced, then linked
 * to its name (which must not exist) or, with replace, renamed over it;
 * then the directory is synced.
 */
async function writeEntry(file: string, e: Entry, replace: boolean): Promise<void> {
  const meta: EntryMeta = {
    id: e.id,
    message_id: e.messageId,
    message_type: e.messageType,
    key: e.key,
    kept_at: e.keptAt.toISOString(),
    attempts: e.attempts,
  };
  if (e.status !== 0) meta.status = e.status;
  if (e.rule !== "") meta.rule = e.rule;
  if (e.reason !== "") meta.reason = e.reason;
  if (e.refused) meta.refused = true;
  const dir = path.dirname(file);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const tmp = path.join(dir, `.tmp-${randomBytes(8).toString("hex")}`);
  try {
    const f = await open(tmp, "wx", 0o600);
    try {
      await f.writeFile(Buffer.concat([Buffer.from(JSON.stringify(meta) + "\n"), e.message]));
      await f.sync();
    } finally {
      await f.close();
    }
    if (replace) await rename(tmp, file);
    else await link(tmp, file);
  } finally {
    await unlink(tmp).catch(() => undefined);
  }
  try {
    const d = await open(dir, "r");
    await d.sync().catch(() => undefined);
    await d.close();
  } catch {
    // A directory that cannot be opened for syncing is synced by the system later.
  }
}

async function readEntry(file: string, id: string): Promise<Entry> {
  const b = await readFile(file);
  const nl = b.indexOf(0x0a);
  let meta: EntryMeta | undefined;
  try {
    meta = nl >= 0 ? (JSON.parse(b.subarray(0, nl).toString("utf8")) as EntryMeta) : undefined;
  } catch {
    meta = undefined;
  }
  if (meta === undefined || typeof meta !== "object" || meta === null) {
    throw new Error(`storybus: outbox entry ${id} is damaged`);
  }
  return {
    id,
    messageId: meta.message_id ?? "",
    messageType: meta.message_type ?? "",
    key: meta.key ?? "",
    keptAt: new Date(meta.kept_at),
    attempts: meta.attempts ?? 0,
    status: meta.status ?? 0,
    rule: meta.rule ?? "",
    reason: meta.reason ?? "",
    refused: meta.refused ?? false,
    message: Uint8Array.from(b.subarray(nl + 1)),
  };
}

/** encodeKey makes a story key a directory name. */
function encodeKey(key: string): string {
  return Buffer.from(key, "utf8").toString("base64url");
}

/** safeName keeps a message_id usable in a file name. */
function safeName(id: string): string {
  if (id === "") return "no-message-id";
  let s = "";
  for (const ch of id) s += /^[A-Za-z0-9-]$/.test(ch) ? ch : "_";
  return s;
}
