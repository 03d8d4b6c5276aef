import { closeSync, openSync, readFileSync, renameSync, rmSync, fsyncSync, writeSync } from "node:fs";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { type Clock, systemClock } from "./clock.js";
import { LRU } from "./lru.js";

/** DEFAULT_DEDUP_SIZE is how many message_ids a Dedup remembers by default. */
export const DEFAULT_DEDUP_SIZE = 100_000;
/** DEFAULT_DEDUP_WINDOW_MS is how long a Dedup remembers a message_id by default: 24 hours. */
export const DEFAULT_DEDUP_WINDOW_MS = 24 * 60 * 60 * 1000;

/** DedupOptions bound a Dedup. */
export interface DedupOptions {
  /** size is the most ids remembered; default 100,000. */
  size?: number;
  /** windowMs is how long an id is remembered; default 24 hours. */
  windowMs?: number;
  /** clock defaults to the wall clock. */
  clock?: Clock;
}

/**
 * Dedup remembers the message_ids a consumer has handled, so that the
 * duplicates of at-least-once delivery are dropped. Its memory is bounded:
 * it remembers at most `size` ids, none for longer than `windowMs`. A
 * duplicate arriving later than that is handled again, so a consumer's
 * handling should still be idempotent where it matters (a snapshot's
 * sequence_number tells a newer one from an older one).
 *
 * A Dedup from newDedup lives in memory and is forgotten when the process
 * ends; one from openDedup also keeps its ids in a file, so that a
 * consumer that restarts still drops what it handled before.
 */
export class Dedup {
  readonly #seen: LRU<true>;
  readonly #clock: Clock;
  #journal: Journal | undefined;

  /** constructor returns an in-memory de-duplicator: newDedup. */
  constructor(options: DedupOptions = {}) {
    const size = options.size && options.size > 0 ? options.size : DEFAULT_DEDUP_SIZE;
    const windowMs = options.windowMs && options.windowMs > 0 ? options.windowMs : DEFAULT_DEDUP_WINDOW_MS;
    this.#seen = new LRU<true>(size, windowMs);
    this.#clock = options.clock ?? systemClock;
  }

  /** seen reports whether id was marked done within the window. */
  seen(id: string): boolean {
    return this.#seen.get(id, this.#clock.now()) !== undefined;
  }

  /**
   * done marks id as handled. A file-backed Dedup that cannot write its
   * file still remembers id in memory, then throws; so does one given an id
   * with a line break, which its file cannot hold.
   */
  done(id: string): void {
    const now = this.#clock.now();
    this.#seen.add(id, true, now);
    if (!this.#journal) return;
    if (/[\r\n]/.test(id)) {
      throw new Error(`storybus: message_id ${JSON.stringify(id)} has a line break: not kept in the de-duplication file`);
    }
    this.#journal.append(id, now, this.#seen);
  }

  /** length returns how many ids are remembered. */
  get length(): number {
    return this.#seen.length;
  }

  /** close closes the file of a Dedup from openDedup; it does nothing for one from newDedup. */
  close(): void {
    this.#journal?.close();
  }

  /** open returns a de-duplicator that keeps its ids in file as well: openDedup. */
  static open(file: string, options: DedupOptions = {}): Dedup {
    const d = new Dedup(options);
    d.#attach(file);
    return d;
  }

  #attach(file: string): void {
    let text = "";
    try {
      text = readFileSync(file, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") {
        throw new Error(`storybus: read the de-duplication file: ${(err as Error).message}`, { cause: err });
      }
    }
    const now = this.#clock.now().getTime();
    // Lines that do not parse (the torn end of a file written when the
    // process stopped) are skipped.
    for (const line of text.split(/(?<=\n)/)) {
      const m = /^(\d+) ([^\n]+)\n$/.exec(line);
      if (!m) continue;
      const at = Number(BigInt(m[1]!) / 1_000_000n);
      if (now - at < this.#seen.windowMs) this.#seen.add(m[2]!, true, new Date(at));
    }
    const j = new Journal(file);
    j.rewrite(this.#seen.oldestFirst());
    this.#journal = j;
  }
}

/**
 * newDedup returns an in-memory de-duplicator of at most size ids
 * (default 100,000), each remembered for windowMs (default 24 hours).
 */
export function newDedup(options: DedupOptions = {}): Dedup {
  return new Dedup(options);
}

/**
 * openDedup returns a de-duplicator like newDedup's that keeps its ids in
 * the file at file as well, created if missing, in the Go client's format
 * (one line per handled message: its time in Unix nanoseconds and its
 * message_id): the ids it holds within the window are remembered again.
 * Each done appends a line to the file (written, not synced: a machine that
 * crashes may lose the last few, and their messages are then handled once
 * more). The file is rewritten with only the remembered ids once it has
 * grown to twice size. One process at a time may use a file. close closes
 * it.
 */
export function openDedup(file: string, options: DedupOptions = {}): Dedup {
  return Dedup.open(file, options);
}

function line(id: string, atMs: number): string {
  return `${BigInt(atMs) * 1_000_000n} ${id}\n`;
}

/** Journal is the append-only file of a Dedup. */
class Journal {
  readonly #file: string;
  #fd: number | undefined;
  #lines = 0;
  /** torn is set when a write failed part-way: the next append rewrites the file whole. */
  #torn = false;

  constructor(file: string) {
    this.#file = file;
  }

  append(id: string, at: Date, seen: LRU<true>): void {
    if (this.#fd === undefined) throw new Error("storybus: the de-duplication file is closed");
    if (this.#torn || this.#lines + 1 >= 2 * seen.size) {
      // seen already holds id.
      this.rewrite(seen.oldestFirst());
      return;
    }
    try {
      writeSync(this.#fd, line(id, at.getTime()));
    } catch (err) {
      this.#torn = true;
      throw new Error(`storybus: write the de-duplication file: ${(err as Error).message}`, { cause: err });
    }
    this.#lines++;
  }

  /**
   * rewrite replaces the file by one of entries, atomically: a new file,
   * synced, renamed over the old one, and kept open for appending.
   */
  rewrite(entries: { key: string; added: number }[]): void {
    const tmp = path.join(path.dirname(this.#file), `.${path.basename(this.#file)}.${randomBytes(6).toString("hex")}`);
    let fd: number | undefined;
    try {
      fd = openSync(tmp, "wx", 0o600);
      writeSync(fd, entries.map((e) => line(e.key, e.added)).join(""));
      fsyncSync(fd);
      closeSync(fd);
      fd = undefined;
      renameSync(tmp, this.#file);
    } catch (err) {
      if (fd !== undefined) closeSync(fd);
      rmSync(tmp, { force: true });
      this.#torn = true;
      throw new Error(`storybus: rewrite the de-duplication file: ${(err as Error).message}`, { cause: err });
    }
    if (this.#fd !== undefined) closeSync(this.#fd);
    this.#fd = openSync(this.#file, "a", 0o600);
    this.#lines = entries.length;
    this.#torn = false;
  }

  close(): void {
    if (this.#fd !== undefined) closeSync(this.#fd);
    this.#fd = undefined;
  }
}
