// The documentation's TypeScript examples: the code blocks of
// docs/producers.md and docs/consumers.md are the files under examples/,
// and run against `storybus dev` they print what the pages say, on a fresh
// bus and after the README's curl pair.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { type Bus, packageDir, repoDir, startDev } from "./support/bus.js";

interface DocExample {
  code: string;
  prints: string;
}

/** docExample returns the code block that follows the page's link to file, and the block after "It prints:". */
function docExample(page: string, file: string): DocExample {
  const text = readFileSync(path.join(repoDir, "docs", page), "utf8");
  const link = `This is [\`clients/typescript/${file}\`]`;
  const at = text.indexOf(link);
  assert.ok(at >= 0, `${page} does not show ${file}`);
  const code = /```ts\n([\s\S]*?)```\n/.exec(text.slice(at));
  const prints = /It prints:\n\n```\n([\s\S]*?)```\n/.exec(text.slice(at));
  assert.ok(code && prints, `${page}: no code block and output after the link to ${file}`);
  return { code: code[1]!, prints: prints[1]! };
}

const dirs: string[] = [];
const buses: Bus[] = [];

after(async () => {
  for (const b of buses) await b.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** runExample runs a compiled example against a bus and returns what it printed. */
function runExample(file: string, bus: Bus): string {
  const outbox = mkdtempSync(path.join(os.tmpdir(), "storybus-ts-docs-"));
  dirs.push(outbox);
  const js = path.join(packageDir, ".test-build", file.replace(/\.ts$/, ".js"));
  return execFileSync(process.execPath, [js], {
    env: { ...process.env, STORYBUS_URL: bus.url, STORYBUS_OUTBOX: outbox, STORYBUS_CLIENT_SECRET: "" },
    encoding: "utf8",
    timeout: 60_000,
  });
}

/** curlPair runs the curl pair `storybus dev` prints in its banner, as the README says to. */
function curlPair(bus: Bus): void {
  const banner = bus.output();
  const token = /^TOKEN=\$\(curl .*$/m.exec(banner)?.[0];
  const publish = /^curl -s -X POST .*$/m.exec(banner)?.[0];
  assert.ok(token && publish, `no curl pair in the banner:\n${banner}`);
  const out = execFileSync("bash", ["-c", `${token}\n${publish}`], { encoding: "utf8" });
  assert.match(out, /"accepted":true/);
}

describe("the documentation's TypeScript examples", () => {
  const producer = docExample("producers.md", "examples/producer.ts");
  const consumer = docExample("consumers.md", "examples/consumer.ts");

  it("are the files under examples/", () => {
    assert.equal(producer.code, readFileSync(path.join(packageDir, "examples", "producer.ts"), "utf8"));
    assert.equal(consumer.code, readFileSync(path.join(packageDir, "examples", "consumer.ts"), "utf8"));
  });

  it("the producer prints what docs/producers.md says, on a fresh bus", async () => {
    const bus = await startDev();
    buses.push(bus);
    assert.equal(runExample("examples/producer.ts", bus), producer.prints);
  });

  it("the producer and the consumer print what the pages say, after the README's curl pair", async () => {
    const bus = await startDev();
    buses.push(bus);
    curlPair(bus);
    assert.equal(runExample("examples/producer.ts", bus), producer.prints);
    assert.equal(runExample("examples/consumer.ts", bus), consumer.prints);
  });
});
