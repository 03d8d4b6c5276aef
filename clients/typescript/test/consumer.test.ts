// The consumer against a real `storybus dev`: pull, acknowledge, drop
// duplicates on message_id; and the de-duplicator's file.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  build,
  Client,
  ClientCredentials,
  Consumer,
  type ConsumerOptions,
  type Delivery,
  newDedup,
  newMessage,
  openDedup,
  StorybusError,
} from "@storybus/client";
import { type Bus, CMS_SECRET, WIRE_SECRET, WORKSPACE, startDev } from "./support/bus.js";
import { FakeClock } from "./support/transport.js";

let bus: Bus;
let producer: Client;
const dirs: string[] = [];

before(async () => {
  bus = await startDev();
  producer = new Client({
    url: bus.url,
    workspace: WORKSPACE,
    tokens: new ClientCredentials({ url: bus.url, workspace: WORKSPACE, clientId: "cms", clientSecret: CMS_SECRET }),
  });
});

after(async () => {
  await bus?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function consumer(name: string, options: Partial<ConsumerOptions> = {}): Consumer {
  return new Consumer({
    url: bus.url,
    workspace: WORKSPACE,
    name,
    families: ["story-event"],
    waitMs: 1000,
    tokens: new ClientCredentials({ url: bus.url, workspace: WORKSPACE, clientId: "cms", clientSecret: CMS_SECRET }),
    ...options,
  });
}

let events = 0;
function event() {
  return build({
    messageType: "story.event",
    systemId: "cms",
    payload: { story_id: `ts-consumer-${++events}`, event: "published", occurred_at: "2026-11-29T09:00:00Z" },
  });
}

/** pullUntil pulls until it has a delivery of every id, or fails after a generous deadline. */
async function pullUntil(c: Consumer, ids: string[]): Promise<Delivery[]> {
  const got = new Map<string, Delivery>();
  const deadline = Date.now() + 30_000;
  while (ids.some((id) => !got.has(id))) {
    assert.ok(Date.now() < deadline, `no delivery of ${ids.filter((id) => !got.has(id))} within 30 s`);
    for (const d of await c.fetch()) if (ids.includes(d.messageId)) got.set(d.messageId, d);
  }
  return ids.map((id) => got.get(id)!);
}

describe("Consumer", () => {
  it("hands over each message byte for byte as its producer sent it", async () => {
    const raw = `{ "payload": {"occurred_at":"2026-11-29T09:00:00Z", "event":"published","story_id":"ts-consumer-raw"},
  "som_version":"1.0","message_id":"5e8d2c4b-1a3f-4e6d-8b9c-0d1e2f3a4b5c","message_type":"story.event","system_id":"cms","timestamp":"2026-11-29T09:00:00Z" }`;
    await producer.publish(newMessage(raw));
    const [d] = await pullUntil(consumer("ts-raw"), ["5e8d2c4b-1a3f-4e6d-8b9c-0d1e2f3a4b5c"]);
    assert.equal(d!.raw, raw);
    assert.equal(d!.message.message_type, "story.event");
    assert.equal(d!.family, "story-event");
    assert.equal(d!.delivery, 1);
  });

  it("acknowledges what it handled, leaves what failed, and drops a redelivered duplicate", async () => {
    const errors: unknown[] = [];
    const c = consumer("ts-run-once", { onError: (e) => errors.push(e) });
    const [a, b, dup] = [event(), event(), event()];
    for (const m of [a, b, dup]) await producer.publish(m);
    // dup is handled before, by this consumer's de-duplicator, and comes
    // again: it must be acknowledged without a handler call.
    c.dedup.done(dup.id);
    const handled: string[] = [];
    let failed: Delivery | undefined;
    const deadline = Date.now() + 30_000;
    while (!handled.includes(a.id) || !failed) {
      assert.ok(Date.now() < deadline, "the messages were not delivered within 30 s");
      await c.runOnce((d) => {
        if (d.messageId === b.id && !failed) {
          failed = d;
          throw new Error("not now");
        }
        handled.push(d.messageId);
      });
    }
    assert.ok(!handled.includes(dup.id), "a duplicate was handed to the handler");
    assert.ok(errors.some((e) => (e as Error).message === "not now"), "the handler's error was not reported");
    // b was not acknowledged: given back at once, it comes again.
    await c.nak([failed!]);
    const [again] = await pullUntil(c, [b.id]);
    assert.ok(again!.delivery >= 2, `delivery ${again!.delivery}`);
    await c.ack([again!]);
    // Everything is acknowledged now: nothing more of these comes.
    const rest = await consumer("ts-run-once", { noWait: true }).fetch();
    assert.deepEqual(rest.filter((d) => [a.id, b.id, dup.id].includes(d.messageId)), []);
  });

  it("runs until stopped, and ends with the error of a refusal that no retry fixes", async () => {
    const m = event();
    await producer.publish(m);
    const stop = new AbortController();
    const seen: string[] = [];
    await consumer("ts-run").run(
      (d) => {
        seen.push(d.messageId);
        if (d.messageId === m.id) stop.abort();
      },
      { signal: stop.signal },
    );
    assert.ok(seen.includes(m.id));

    // wire may consume story-context only.
    const wire = consumer("ts-run-wire", {
      tokens: new ClientCredentials({ url: bus.url, workspace: WORKSPACE, clientId: "wire", clientSecret: WIRE_SECRET }),
    });
    const err = await wire.run(() => undefined).catch((e: unknown) => e);
    assert.ok(err instanceof StorybusError);
    assert.deepEqual([err.status, err.rule], [403, "grant.family"]);
    assert.match(err.message, /wire/, "the bus's explanation is not in the message");
  });

  it("refuses a name the bus would refuse", () => {
    assert.throws(() => consumer("no spaces"), /1 to 64 letters/);
  });
});

describe("Dedup", () => {
  it("forgets ids after its window and beyond its size", async () => {
    const clock = new FakeClock();
    const d = newDedup({ size: 2, windowMs: 1000, clock });
    d.done("a");
    d.done("b");
    d.done("c");
    assert.deepEqual([d.seen("a"), d.seen("b"), d.seen("c"), d.length], [false, true, true, 2]);
    await clock.sleep(1000);
    assert.equal(d.seen("c"), false);
  });

  it("keeps its ids in a file, in the Go client's format, across restarts", () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "storybus-ts-dedup-"));
    dirs.push(dir);
    const file = path.join(dir, "dedup");
    const now = Date.now();
    // A line the Go client wrote, and a torn last line.
    writeFileSync(file, `${BigInt(now - 1000) * 1_000_000n} from-go\n${BigInt(now) * 1_000_000n} tor`);
    const d = openDedup(file, { size: 3 });
    assert.ok(d.seen("from-go"));
    assert.ok(!d.seen("tor"));
    d.done("from-ts");
    d.close();
    const lines = readFileSync(file, "utf8").trimEnd().split("\n");
    assert.match(lines.at(-1)!, /^\d{19} from-ts$/);
    const again = openDedup(file, { size: 3 });
    assert.ok(again.seen("from-go") && again.seen("from-ts"));
    // Written past twice its size, the file is rewritten with the remembered ids only.
    for (const id of ["x1", "x2", "x3", "x4", "x5", "x6"]) again.done(id);
    again.close();
    assert.ok(readFileSync(file, "utf8").trimEnd().split("\n").length <= 6);
    assert.throws(() => openDedup(file).done("a\nb"), /line break/);
  });
});
