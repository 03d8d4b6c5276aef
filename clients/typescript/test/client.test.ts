// The client against a real `storybus dev`: what the conformance scenarios
// leave to each client (its options, resend, the outbox shared with the Go
// command line, trace context, aborts, token errors).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  build,
  Client,
  ClientCredentials,
  Consumer,
  HeldError,
  isHeld,
  isKept,
  isNoAnswer,
  needsRebuild,
  newMessage,
  openOutbox,
  RULE_QUOTA_EXCEEDED,
  SANDBOX_LOST,
  StaticToken,
  StorybusError,
  type Options,
} from "@storybus/client";
import { type Bus, CMS_SECRET, storybusBinary, WIRE_SECRET, WORKSPACE, startDev } from "./support/bus.js";
import { FakeClock, Recorder } from "./support/transport.js";

let bus: Bus;
const dirs: string[] = [];

function tempDir(): string {
  const d = mkdtempSync(path.join(os.tmpdir(), "storybus-ts-client-"));
  dirs.push(d);
  return d;
}

/** setup returns a client of cms with a recorder, a fake clock and the options given. */
function setup(options: Partial<Options> = {}) {
  const recorder = new Recorder();
  const clock = new FakeClock();
  const tokens = new ClientCredentials({
    url: bus.url,
    workspace: WORKSPACE,
    clientId: "cms",
    clientSecret: CMS_SECRET,
    fetch: recorder.fetch,
    clock,
  });
  const client = new Client({ url: bus.url, workspace: WORKSPACE, tokens, fetch: recorder.fetch, clock, ...options });
  return { client, recorder, clock, tokens };
}

let stories = 0;
/** snapshot builds a new snapshot of a story of its own (or of story). */
function snapshot(sequence: number, story = `ts-client-${++stories}`, state: "draft" | "ready" = "draft") {
  return build({
    messageType: "story.context",
    systemId: "cms",
    payload: { story_id: story, sequence_number: sequence, state, headline: `Snapshot ${sequence} of ${story}` },
  });
}

before(async () => {
  bus = await startDev();
});

after(async () => {
  await bus?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe("publish", () => {
  it("sends the bytes it was given, and reads 202 and 200 duplicate", async () => {
    const { client, recorder } = setup();
    const raw = `{"som_version":"1.0", "message_id":"3c0e5d1a-7b2f-4c8e-9a6d-1f2e3d4c5b6a","message_type":"story.event","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"ts-raw","event":"published","occurred_at":"2026-11-29T09:00:00Z"}}`;
    const m = newMessage(raw);
    const first = await client.publish(m);
    assert.deepEqual([first.status, first.duplicate, first.family, first.attempts], [202, false, "story-event", 1]);
    const again = await client.publish(m);
    assert.deepEqual([again.status, again.duplicate, again.messageId], [200, true, m.id]);
    for (const p of recorder.publishes()) assert.equal(new TextDecoder().decode(p.body), raw);
  });

  it("answers a snapshot refused with 409 from memory, and asks for a rebuild", async () => {
    const { client, recorder } = setup();
    const story = `ts-client-stale-${++stories}`;
    await client.publish(snapshot(2, story));
    const older = snapshot(1, story);
    const first = await client.publish(older).catch((e: unknown) => e);
    assert.ok(first instanceof StorybusError);
    assert.deepEqual([first.status, first.rule, first.rebuild(), needsRebuild(first), first.kept], [409, "sequence.stale", true, true, false]);
    assert.equal(first.class(), "story-changed");
    const sends = recorder.publishes().length;
    const second = await client.publish(older).catch((e: unknown) => e);
    assert.ok(second instanceof StorybusError && second.notResent && second.attempts === 0 && second.status === 409);
    assert.match(second.message, /refused before and was not sent again/);
    assert.equal(recorder.publishes().length, sends, "the refused snapshot was sent again");
  });

  it("sends the sandbox header of its option, per attempt", async () => {
    const answers = ["bus.publish_failed", SANDBOX_LOST, ""];
    const { client, recorder, clock } = setup({ sandboxAnswer: (n) => answers[n - 1] });
    const res = await client.publish(snapshot(1));
    assert.deepEqual([res.status, res.duplicate, res.attempts], [200, true, 3]);
    assert.deepEqual(
      recorder.publishes().map((p) => p.headers["Storybus-Sandbox-Answer"]),
      ["bus.publish_failed", "lost", undefined],
    );
    assert.ok(clock.waits[0]! >= 1000, "the 503's Retry-After was not honoured");
  });

  it("keeps a message at once when Retry-After is longer than it waits for", async () => {
    const { client, recorder } = setup({ sandboxAnswer: "bus.publish_failed", outbox: await openOutbox(tempDir()) });
    const err = await client.publish(snapshot(1), { sandboxAnswer: RULE_QUOTA_EXCEEDED }).catch((e: unknown) => e);
    assert.ok(err instanceof StorybusError);
    assert.deepEqual([err.status, err.rule, err.kept, err.attempts], [429, RULE_QUOTA_EXCEEDED, true, 1]);
    assert.ok(err.retryAfterMs > 0);
    assert.equal(err.class(), "not-delivered");
    assert.equal(recorder.publishes().length, 1);
  });

  it("alerts for what a person must act on, and fails a wrong secret at the token endpoint without retrying", async () => {
    const alerts: StorybusError[] = [];
    const recorder = new Recorder();
    const tokens = new ClientCredentials({ url: bus.url, workspace: WORKSPACE, clientId: "cms", clientSecret: "not-the-secret-0123456789abcdef0", fetch: recorder.fetch });
    const client = new Client({ url: bus.url, workspace: WORKSPACE, tokens, fetch: recorder.fetch, onAlert: (e) => alerts.push(e) });
    const err = await client.publish(snapshot(1)).catch((e: unknown) => e);
    assert.ok(err instanceof StorybusError);
    assert.deepEqual([err.status, err.oauth2, err.rule, err.attempts], [401, "invalid_client", "auth.credentials.invalid", 0]);
    assert.equal(err.class(), "not-allowed");
    assert.match(err.advice(), /client id or secret is not accepted/);
    assert.equal(recorder.tokenRequests().length, 1);
    assert.equal(recorder.publishes().length, 0);
    assert.deepEqual(alerts, [err]);
  });

  it("keeps the message when the caller's signal aborts, and says why", async () => {
    const outbox = await openOutbox(tempDir());
    const c = new AbortController();
    const { client } = setup({
      outbox,
      sandboxAnswer: "bus.publish_failed",
      clock: {
        now: () => new Date(),
        sleep: async (_, signal) => {
          c.abort(new Error("the producer is stopping"));
          throw signal?.reason;
        },
      },
    });
    const m = snapshot(1);
    const err = await client.publish(m, { signal: c.signal }).catch((e: unknown) => e);
    assert.ok(err instanceof StorybusError && isKept(err), String(err));
    assert.equal(err.status, 503);
    const [entry] = await outbox.list();
    assert.equal(entry?.messageId, m.id);
    assert.match(entry!.reason, /kept in the outbox/);

    const before = new AbortController();
    before.abort(new Error("stopped"));
    const never = await setup({ outbox }).client.publish(snapshot(1), { signal: before.signal }).catch((e: unknown) => e);
    assert.ok(isNoAnswer(never) && isKept(never) && (never as StorybusError).attempts === 0, String(never));
  });

  it("passes the caller's trace context through to the consumers", async () => {
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const { client, recorder } = setup({ traceContext: () => ({ traceparent: "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01" }) });
    const m = build({
      messageType: "story.event",
      systemId: "cms",
      payload: { story_id: `ts-trace-${++stories}`, event: "published", occurred_at: "2026-11-29T09:00:00Z" },
    });
    await client.publish(m, { trace: { traceparent, tracestate: "vendor=1" } });
    const sent = recorder.publishes()[0]!;
    assert.equal(sent.headers.traceparent, traceparent);
    assert.equal(sent.headers.tracestate, "vendor=1");

    // A traceparent that is not one is not sent; the option's is used without one given.
    const bad = setup();
    await bad.client.publish(snapshot(1), { trace: { traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01", tracestate: "a=b" } });
    assert.equal(bad.recorder.publishes()[0]!.headers.traceparent, undefined);
    assert.equal(bad.recorder.publishes()[0]!.headers.tracestate, undefined);
    await client.publish(snapshot(1));
    assert.equal(recorder.publishes()[1]!.headers.traceparent, "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01");

    const consumer = new Consumer({
      url: bus.url,
      workspace: WORKSPACE,
      name: "ts-trace",
      families: ["story-event"],
      noWait: true,
      max: 100,
      tokens: new ClientCredentials({ url: bus.url, workspace: WORKSPACE, clientId: "cms", clientSecret: CMS_SECRET }),
    });
    let found;
    for (let i = 0; i < 50 && !found; i++) {
      found = (await consumer.fetch()).find((d) => d.messageId === m.id);
    }
    assert.equal(found?.traceparent, traceparent);
    assert.equal(found?.tracestate, "vendor=1");
  });

  it("holds a story's next message while one is retried, and lets other stories carry on", async () => {
    const story = `ts-client-held-${++stories}`;
    const first = snapshot(1, story);
    const second = snapshot(2, story);
    const other = snapshot(1);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { client, recorder } = setup({
      sandboxAnswer: (n, m) => (m.id === first.id && n === 1 ? "bus.publish_failed" : undefined),
      clock: { now: () => new Date(), sleep: () => gate },
    });
    const p1 = client.send(first);
    const p2 = client.send(second);
    const p3 = client.send(other);
    assert.equal((await p3.wait()).status, 202, "another story waited");
    assert.ok(!p2.done, "the story's next message did not wait");
    assert.deepEqual(recorder.publishes().map((p) => newMessage(p.body).id), [first.id, other.id]);
    release();
    assert.equal((await p1.wait()).attempts, 2);
    assert.equal((await p2.wait()).status, 202);
    assert.deepEqual(
      recorder.publishes().map((p) => newMessage(p.body).id),
      [first.id, other.id, first.id, second.id],
    );
  });
});

describe("outbox", () => {
  it("resends the kept messages in story order, and holds a story's new message behind them", async () => {
    const outbox = await openOutbox(tempDir());
    const story = `ts-outbox-${++stories}`;
    const down = setup({ outbox, sandboxAnswer: "bus.unavailable", retry: { attempts: 2 } });
    const kept = [snapshot(1, story), snapshot(2, story)];
    for (const m of kept) {
      const err = await down.client.publish(m).catch((e: unknown) => e);
      assert.ok(isKept(err), String(err));
    }
    // The story's next message waits behind the kept ones, which still fail.
    const held = await down.client.publish(snapshot(3, story)).catch((e: unknown) => e);
    assert.ok(isHeld(held) && isKept(held) && (held as StorybusError).cause instanceof HeldError, String(held));
    assert.deepEqual((await outbox.list()).map((e) => e.key), [`story:${story}`, `story:${story}`, `story:${story}`]);

    // Back up: the next publish of the story sends the kept ones first, in order.
    const up = setup({ outbox });
    const fourth = snapshot(4, story);
    const res = await up.client.publish(fourth);
    assert.equal(res.status, 202);
    assert.deepEqual(
      up.recorder.publishes().map((p) => newMessage(p.body).id),
      [kept[0]!.id, kept[1]!.id, (held as StorybusError).messageId, fourth.id],
    );
    assert.deepEqual(await outbox.list(), []);
  });

  it("moves an entry the bus refuses on a resend to the refused entries", async () => {
    const outbox = await openOutbox(tempDir());
    const story = `ts-outbox-refused-${++stories}`;
    const down = setup({ outbox, sandboxAnswer: "bus.unavailable", retry: { attempts: 1 } });
    await down.client.publish(snapshot(1, story)).catch(() => undefined);
    const refusing = setup({ outbox, sandboxAnswer: "sequence.terminal" });
    const [r] = await refusing.client.resend();
    assert.ok(r?.error instanceof StorybusError && r.error.status === 409);
    assert.equal(r.entry.refused, true);
    assert.deepEqual(await outbox.list(), []);
    const [refused] = await outbox.refused();
    assert.deepEqual([refused?.status, refused?.rule, refused?.refused], [409, "sequence.terminal", true]);
  });

  it("shares its directory with the Go command line: storybus outbox lists and resends what it kept", async () => {
    const dir = tempDir();
    const outbox = await openOutbox(dir);
    const down = setup({ outbox, sandboxAnswer: "bus.publish_failed", retry: { attempts: 1 } });
    const m = snapshot(1);
    await down.client.publish(m).catch(() => undefined);
    const env = { ...process.env, STORYBUS_URL: bus.url, STORYBUS_WORKSPACE: WORKSPACE, STORYBUS_CLIENT_ID: "cms", STORYBUS_CLIENT_SECRET: CMS_SECRET };
    const listed = execFileSync(storybusBinary(), ["outbox", "list", "--json", "--outbox", dir], { env, encoding: "utf8" });
    const line = JSON.parse(listed.trim().split("\n")[0]!) as Record<string, unknown>;
    assert.equal(line.message_id, m.id);
    assert.equal(line.status, 503);
    assert.equal(JSON.stringify(line.message), m.text());
    const resent = execFileSync(storybusBinary(), ["outbox", "resend", "--outbox", dir], { env, encoding: "utf8" });
    assert.equal((JSON.parse(resent.trim()) as { status: number }).status, 202);
    assert.deepEqual(await outbox.list(), []);

    // And the other way: what the command line keeps, this client resends.
    const unreachable = "http://127.0.0.1:9";
    const goKept = snapshot(1);
    try {
      execFileSync(storybusBinary(), ["publish", "--attempts", "1", "--outbox", dir, "--url", unreachable, "-"], {
        env,
        input: goKept.text(),
        encoding: "utf8",
        stdio: ["pipe", "pipe", "pipe"],
      });
      assert.fail("storybus publish to an unreachable bus succeeded");
    } catch (err) {
      assert.equal((err as { status?: number }).status, 5, String(err));
    }
    const [entry] = await outbox.list();
    assert.equal(entry?.messageId, goKept.id);
    assert.equal(new TextDecoder().decode(entry!.message), goKept.text());
    const up = setup({ outbox });
    const [r] = await up.client.resend();
    assert.equal(r?.result?.status, 202);
  });
});

describe("tokens", () => {
  it("gets one token and keeps it until shortly before it expires", async () => {
    const recorder = new Recorder();
    const clock = new FakeClock();
    const tokens = new ClientCredentials({ url: bus.url, workspace: WORKSPACE, clientId: "wire", clientSecret: WIRE_SECRET, fetch: recorder.fetch, clock });
    const [a, b] = await Promise.all([tokens.token(), tokens.token()]);
    assert.equal(a, b);
    assert.equal(recorder.tokenRequests().length, 1, "two callers at once made two requests");
    await clock.sleep(3600_000 - 61_000);
    assert.equal(await tokens.token(), a);
    await clock.sleep(2_000);
    await tokens.token();
    assert.equal(recorder.tokenRequests().length, 2, "the token was not replaced a minute before it expired");
    tokens.invalidate(await tokens.token());
    await tokens.token();
    assert.equal(recorder.tokenRequests().length, 3);
  });

  it("a static token is refused once with 401 and not retried again", async () => {
    const recorder = new Recorder();
    const client = new Client({ url: bus.url, workspace: WORKSPACE, tokens: new StaticToken("not-a-token"), fetch: recorder.fetch, outbox: await openOutbox(tempDir()) });
    const err = await client.publish(snapshot(1)).catch((e: unknown) => e);
    assert.ok(err instanceof StorybusError);
    assert.deepEqual([err.status, err.rule, err.kept, err.class()], [401, "auth.token.invalid", true, "not-allowed"]);
    assert.equal(recorder.publishes().length, 2);
  });
});
