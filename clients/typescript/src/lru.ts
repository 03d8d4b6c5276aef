/**
 * LRU is a bounded map that forgets, when full, the entry least recently
 * added (or added again), and forgets entries older than its window, as
 * measured by the client's clock. Reading an entry does not make it
 * recent: the client's memories are of what it did (a snapshot refused, an
 * id handled), not of what it asked.
 */
export class LRU<V> {
  readonly size: number;
  /** windowMs is how long an entry is remembered; 0: no window. */
  readonly windowMs: number;
  // A Map iterates in insertion order: the first entry is the oldest.
  readonly #items = new Map<string, { value: V; added: number }>();

  constructor(size: number, windowMs = 0) {
    if (!(size >= 1)) throw new RangeError("storybus: an LRU holds at least one entry");
    this.size = Math.floor(size);
    this.windowMs = windowMs;
  }

  #expired(added: number, now: Date): boolean {
    return this.windowMs > 0 && now.getTime() - added >= this.windowMs;
  }

  /** get returns the value of key, unless it was forgotten. */
  get(key: string, now: Date): V | undefined {
    const it = this.#items.get(key);
    if (it === undefined) return undefined;
    if (this.#expired(it.added, now)) {
      this.#items.delete(key);
      return undefined;
    }
    return it.value;
  }

  /** add remembers key with value, as the most recent entry, added at `at`. */
  add(key: string, value: V, at: Date): void {
    this.#items.delete(key);
    this.#items.set(key, { value, added: at.getTime() });
    for (const [k, it] of this.#items) {
      if (this.#items.size <= this.size && !this.#expired(it.added, at)) break;
      this.#items.delete(k);
    }
  }

  /** length returns how many entries are remembered. */
  get length(): number {
    return this.#items.size;
  }

  /** oldestFirst returns the keys and when they were added, oldest first. */
  oldestFirst(): { key: string; added: number }[] {
    return [...this.#items].map(([key, it]) => ({ key, added: it.added }));
  }
}
