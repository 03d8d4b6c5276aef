// The client conformance scenarios (clients/conformance/scenarios.json),
// every one of them, against a real `storybus dev`: the runner the file's
// README describes, for the TypeScript client.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  Client,
  ClientCredentials,
  type FileOutbox,
  newMessage,
  openOutbox,
  type Result,
  StorybusError,
} from "@storybus/client";
import { type Bus, CMS_SECRET, repoDir, startDev } from "./support/bus.js";
import { FakeClock, Recorder } from "./support/transport.js";

interface Expect {
  outcome?: "accepted" | "duplicate" | "refused" | "kept";
  status?: number;
  rule?: string;
  path?: string;
  attempts?: number;
  sameBytes?: boolean;
  tokenRequests?: number;
  minWaitSeconds?: number;
  waitsAtLeast?: number[];
  outbox?: boolean;
  order?: string[];
}

interface Step {
  publish?: string;
  answers?: string[];
  concurrent?: Step[];
  expect?: Expect;
}

interface Scenario {
  name: string;
  summary: string;
  retry?: { maxAttempts?: number };
  steps: Step[];
}

interface ScenarioFile {
  version: number;
  workspace: string;
  clientId: string;
  messages: Record<string, unknown>;
  scenarios: Scenario[];
}

const scenarioFile = path.join(repoDir, "clients", "conformance", "scenarios.json");
const file = JSON.parse(readFileSync(scenarioFile, "utf8")) as ScenarioFile;

// The expect members each kind of step may carry: a member the runner
// does not know, or one in the wrong place, fails the step. A plain step's
// order shows a kept message of its story resent before its own.
const plainMembers = ["outcome", "status", "rule", "path", "attempts", "sameBytes", "tokenRequests", "minWaitSeconds", "waitsAtLeast", "outbox", "order"];
const listedMembers = ["outcome", "status", "rule", "path", "attempts", "sameBytes", "outbox"];
const concurrentMembers = ["order"];

/** bytesOf serialises a message of the file once: compact, members in the file's order. */
function bytesOf(key: string): string {
  const m = file.messages[key];
  assert.ok(m !== undefined, `no message ${JSON.stringify(key)} in the file`);
  return JSON.stringify(m);
}

/** keyOf names an attempt in an order: the key of the file's message whose bytes it sent, "?" for none. */
const keyOf = new Map(Object.keys(file.messages).map((k) => [bytesOf(k), k]));

/** messageIdOf is the message_id of an attempt's body, what tells a step's own attempts from those of a kept message resent before it. */
function messageIdOf(body: string): string {
  try {
    const id = (JSON.parse(body) as { message_id?: unknown }).message_id;
    return typeof id === "string" ? id : "";
  } catch {
    return "";
  }
}

/** Run is one scenario's client, outbox, transport and clock. */
interface Run {
  client: Client;
  outbox: FileOutbox;
  recorder: Recorder;
  clock: FakeClock;
  /** step answers by the message_id of the message they are for, and how many attempts of it were made in the step. */
  plan: Map<string, { answers: string[]; n: number }>;
}

/** Outcome is what one published message ended with. */
interface Outcome {
  key: string;
  bytes: string;
  result?: Result;
  error?: unknown;
}

describe("conformance scenarios", () => {
  let bus: Bus;
  const dirs: string[] = [];

  before(async () => {
    assert.equal(file.version, 1, "the runner reads version 1 of the scenario file");
    bus = await startDev();
  });

  after(async () => {
    await bus?.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it("has scenarios, and messages told apart by their bytes", () => {
    assert.ok(file.scenarios.length > 0);
    assert.equal(keyOf.size, Object.keys(file.messages).length, "two messages of the file are the same bytes");
  });

  for (const scenario of file.scenarios) {
    it(scenario.name, async (t) => {
      const dir = mkdtempSync(path.join(os.tmpdir(), "storybus-ts-conformance-"));
      dirs.push(dir);
      const clock = new FakeClock();
      const recorder = new Recorder();
      const plan = new Map<string, { answers: string[]; n: number }>();
      recorder.answerFor = (_, body) => {
        const p = plan.get(messageIdOf(new TextDecoder().decode(body)));
        if (!p) return "";
        return p.answers[p.n++] ?? "";
      };
      const outbox = await openOutbox(dir);
      const client = new Client({
        url: bus.url,
        workspace: file.workspace,
        tokens: new ClientCredentials({
          url: bus.url,
          workspace: file.workspace,
          clientId: file.clientId,
          clientSecret: CMS_SECRET,
          fetch: recorder.fetch,
          clock,
        }),
        fetch: recorder.fetch,
        outbox,
        clock,
        retry: scenario.retry?.maxAttempts ? { attempts: scenario.retry.maxAttempts } : {},
      });
      const run: Run = { client, outbox, recorder, clock, plan };
      for (const [i, step] of scenario.steps.entries()) {
        await t.test(`step ${i + 1}`, () => runStep(run, step, `${scenario.name}: ${scenario.summary}: step ${i + 1}`));
      }
    });
  }
});

async function runStep(run: Run, step: Step, where: string): Promise<void> {
  const sentBefore = run.recorder.sent.length;
  const waitsBefore = run.clock.waits.length;
  run.plan.clear();
  const listed = step.concurrent ?? [step];
  if (step.concurrent) {
    checkMembers(step.expect, concurrentMembers, `${where} (concurrent)`);
    for (const s of listed) checkMembers(s.expect, listedMembers, `${where} (${s.publish})`);
  } else {
    checkMembers(step.expect, plainMembers, where);
  }
  for (const s of listed) {
    assert.ok(s.publish, `${where}: a step without publish`);
    const id = messageIdOf(bytesOf(s.publish));
    assert.ok(!run.plan.has(id), `${where}: two messages of one step have message_id ${id}`);
    run.plan.set(id, { answers: s.answers ?? [], n: 0 });
  }
  // Every message handed over at once, in order, then every answer awaited.
  const pendings = listed.map((s) => {
    const bytes = bytesOf(s.publish!);
    return { key: s.publish!, bytes, pending: run.client.send(newMessage(bytes)) };
  });
  const outcomes: Outcome[] = [];
  for (const p of pendings) {
    try {
      outcomes.push({ key: p.key, bytes: p.bytes, result: await p.pending.wait() });
    } catch (error) {
      outcomes.push({ key: p.key, bytes: p.bytes, error });
    }
  }
  const sent = run.recorder.sent.slice(sentBefore);
  const publishes = sent.filter((s) => s.method === "POST" && s.url.endsWith("/messages"));
  const waits = run.clock.waits.slice(waitsBefore);
  for (const [i, s] of listed.entries()) {
    const o = outcomes[i]!;
    // The step's message's own attempts, by message_id: a kept message
    // the client resends first counts in no attempts, only in the order.
    const own = publishes.filter((p) => messageIdOf(new TextDecoder().decode(p.body)) === messageIdOf(o.bytes));
    const at = step.concurrent ? `${where} (${s.publish})` : where;
    await checkMessage(run, s.expect ?? {}, o, own, at);
    if (!step.concurrent) {
      checkStep(step.expect ?? {}, sent, waits, at);
    }
  }
  if (step.expect?.order) {
    const order = publishes.map((p) => keyOf.get(new TextDecoder().decode(p.body)) ?? "?");
    assert.deepEqual(order, step.expect.order, `${where}: order of the attempts`);
  }
}

function checkMembers(expect: Expect | undefined, allowed: string[], where: string): void {
  for (const k of Object.keys(expect ?? {})) {
    assert.ok(allowed.includes(k), `${where}: expect member ${JSON.stringify(k)} is unknown here`);
  }
}

async function checkMessage(run: Run, x: Expect, o: Outcome, own: { body: Uint8Array }[], where: string): Promise<void> {
  const e = o.error;
  if (e !== undefined && !(e instanceof StorybusError)) throw e;
  const describe = () => (o.result ? JSON.stringify(o.result) : String((e as Error).message));
  switch (x.outcome) {
    case undefined:
      break;
    case "accepted":
      assert.equal(o.result?.status, 202, `${where}: outcome accepted, got ${describe()}`);
      break;
    case "duplicate":
      assert.ok(o.result?.status === 200 && o.result.duplicate, `${where}: outcome duplicate, got ${describe()}`);
      break;
    case "refused":
      assert.ok(e instanceof StorybusError && e.refused() && !e.kept, `${where}: outcome refused, got ${describe()}`);
      break;
    case "kept":
      assert.ok(
        e instanceof StorybusError && !e.refused() && e.kept && e.outboxEntry !== "",
        `${where}: outcome kept, got ${describe()}`,
      );
      break;
    default:
      assert.fail(`${where}: unknown outcome ${JSON.stringify(x.outcome)}`);
  }
  if (x.status !== undefined) {
    const status = o.result?.status ?? (e as StorybusError).status;
    assert.equal(status, x.status, `${where}: status (${describe()})`);
  }
  if (x.rule !== undefined) {
    assert.ok(e instanceof StorybusError, `${where}: rule ${x.rule} expected, got ${describe()}`);
    assert.equal(e.rule, x.rule, `${where}: rule`);
  }
  if (x.path !== undefined) {
    assert.ok(e instanceof StorybusError, `${where}: path ${x.path} expected, got ${describe()}`);
    assert.equal(e.violations[0]?.path, x.path, `${where}: path`);
  }
  if (x.attempts !== undefined) {
    assert.equal(own.length, x.attempts, `${where}: attempts`);
    const counted = o.result?.attempts ?? (e as StorybusError).attempts;
    assert.equal(counted, x.attempts, `${where}: attempts the client counted`);
  }
  if (x.sameBytes !== undefined) {
    const same = own.every((p) => new TextDecoder().decode(p.body) === o.bytes);
    assert.equal(same, x.sameBytes, `${where}: sameBytes`);
  }
  if (x.outbox !== undefined) {
    const id = (JSON.parse(o.bytes) as { message_id?: string }).message_id;
    const kept = (await run.outbox.list()).filter((en) => en.messageId === id);
    if (x.outbox) {
      assert.equal(kept.length, 1, `${where}: the outbox holds the message`);
      assert.equal(new TextDecoder().decode(kept[0]!.message), o.bytes, `${where}: the kept bytes are unchanged`);
    } else {
      assert.equal(kept.length, 0, `${where}: the outbox holds no entry of the message`);
    }
  }
}

function checkStep(x: Expect, sent: { method: string; url: string }[], waits: number[], where: string): void {
  if (x.tokenRequests !== undefined) {
    const n = sent.filter((s) => s.method === "POST" && s.url.endsWith("/tokens")).length;
    assert.equal(n, x.tokenRequests, `${where}: tokenRequests`);
  }
  if (x.minWaitSeconds !== undefined) {
    const total = waits.reduce((a, b) => a + b, 0);
    assert.ok(total >= x.minWaitSeconds * 1000, `${where}: waits of ${total} ms, want at least ${x.minWaitSeconds} s`);
  }
  if (x.waitsAtLeast !== undefined) {
    assert.ok(waits.length >= x.waitsAtLeast.length, `${where}: ${waits.length} waits, want at least ${x.waitsAtLeast.length}`);
    for (const [i, s] of x.waitsAtLeast.entries()) {
      assert.ok(waits[i]! >= s * 1000, `${where}: wait ${i + 1} is ${waits[i]} ms, want at least ${s} s`);
    }
  }
}
