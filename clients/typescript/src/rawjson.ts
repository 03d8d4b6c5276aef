// JSON.parse keeps no bytes, and a pull answer holds each message byte for
// byte as its producer sent it. rawMessages finds those bytes in the
// answer's text. It reads only text JSON.parse has already accepted.

/**
 * rawMessages returns the text of the `message` member of every element
 * of the `messages` array of a pull answer, in order ("" for an element
 * without one).
 */
export function rawMessages(text: string): string[] {
  const s = new Scanner(text);
  const out: string[] = [];
  s.object((key) => {
    if (key !== "messages" || s.peek() !== "[") {
      s.skip();
      return;
    }
    s.array(() => {
      let raw = "";
      if (s.peek() !== "{") {
        s.skip();
      } else {
        s.object((member) => {
          const start = s.pos();
          s.skip();
          if (member === "message") raw = text.slice(start, s.pos());
        });
      }
      out.push(raw);
    });
  });
  return out;
}

class Scanner {
  #i = 0;
  readonly #s: string;

  constructor(s: string) {
    this.#s = s;
  }

  pos(): number {
    this.#ws();
    return this.#i;
  }

  peek(): string {
    this.#ws();
    return this.#s[this.#i] ?? "";
  }

  #ws(): void {
    while (this.#i < this.#s.length && " \t\r\n".includes(this.#s[this.#i]!)) this.#i++;
  }

  #expect(c: string): void {
    if (this.peek() !== c) throw new SyntaxError(`storybus: expected ${c} at ${this.#i}`);
    this.#i++;
  }

  /** object calls member for every member of an object, positioned at its value, which member must read. */
  object(member: (key: string) => void): void {
    this.#expect("{");
    if (this.peek() === "}") {
      this.#i++;
      return;
    }
    for (;;) {
      const start = this.pos();
      this.#string();
      const key = JSON.parse(this.#s.slice(start, this.#i)) as string;
      this.#expect(":");
      member(key);
      if (this.peek() === ",") {
        this.#i++;
        continue;
      }
      this.#expect("}");
      return;
    }
  }

  /** array calls element for every element of an array, positioned at it, which element must read. */
  array(element: () => void): void {
    this.#expect("[");
    if (this.peek() === "]") {
      this.#i++;
      return;
    }
    for (;;) {
      element();
      if (this.peek() === ",") {
        this.#i++;
        continue;
      }
      this.#expect("]");
      return;
    }
  }

  #string(): void {
    this.#expect('"');
    while (this.#i < this.#s.length) {
      const c = this.#s[this.#i++];
      if (c === "\\") this.#i++;
      else if (c === '"') return;
    }
    throw new SyntaxError("storybus: unterminated string");
  }

  /** skip reads one value. */
  skip(): void {
    const c = this.peek();
    if (c === "{") this.object(() => this.skip());
    else if (c === "[") this.array(() => this.skip());
    else if (c === '"') this.#string();
    else {
      while (this.#i < this.#s.length && !",]} \t\r\n".includes(this.#s[this.#i]!)) this.#i++;
    }
  }
}
