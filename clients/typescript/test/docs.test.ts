// The documentation's TypeScript examples: the code blocks of
// docs/producers.md, docs/consumers.md and this package's README are the
// files under examples/, and run against `storybus dev` they print what the
// pages say, on a fresh bus and after the README's curl pair; the package
// README's runs again and again.

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

/**
 * docExample returns the code block that follows the page's link to file
 * (page and link relative to the repository, or to this package for its
 * README), and the block after "It prints:".
 */
function docExample(page: string, file: string): DocExample {
  const own = page === "README.md";
  const text = readFileSync(own ? path.join(packageDir, page) : path.join(repoDir, page), "utf8");
  const link = own ? `This is [\`${file}\`]` : `This is [\`clients/typescript/${file}\`]`;
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
    cwd: outbox, // where an example's relative outbox folder goes
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
  const producer = docExample("docs/producers.md", "examples/producer.ts");
  const consumer = docExample("docs/consumers.md", "examples/consumer.ts");
  const readme = docExample("README.md", "examples/readme.ts");

  it("are the files under examples/", () => {
    assert.equal(producer.code, readFileSync(path.join(packageDir, "examples", "producer.ts"), "utf8"));
    assert.equal(consumer.code, readFileSync(path.join(packageDir, "examples", "consumer.ts"), "utf8"));
    assert.equal(readme.code, readFileSync(path.join(packageDir, "examples", "readme.ts"), "utf8"));
  });

  it("the package README's example prints what it says, run after itself and after the docs' examples", async () => {
    const bus = await startDev();
    buses.push(bus);
    assert.equal(runExample("examples/readme.ts", bus), readme.prints);
    assert.equal(runExample("examples/readme.ts", bus), readme.prints, "the README's example, run a second time");
    assert.equal(runExample("examples/producer.ts", bus), producer.prints);
    assert.equal(runExample("examples/readme.ts", bus), readme.prints);
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
