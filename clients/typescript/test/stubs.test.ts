// Narrow stubs, named as such, for what a real bus cannot be made to do:
// an attempt that never gets an answer (a timeout), a proxy's HTML error
// page, a Retry-After given as an HTTP date.

import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { build, Client, StaticToken, StorybusError } from "@storybus/client";
import { FakeClock } from "./support/transport.js";

/** A stub publish route: each request is answered by the next function of answers. */
type Answer = (res: http.ServerResponse) => void;

let server: http.Server;
let url: string;
let answers: Answer[] = [];
let bodies: string[] = [];

const accepted: Answer = (res) => {
  res.writeHead(202, { "Content-Type": "application/json" });
  res.end('{"accepted":true,"message_id":"m","message_type":"story.event","family":"story-event","tolerated":[]}');
};

before(async () => {
  server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      bodies.push(body);
      const next = answers.shift() ?? accepted;
      next(res);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

function event() {
  return build({
    messageType: "story.event",
    systemId: "cms",
    payload: { story_id: "stub", event: "published", occurred_at: "2026-11-29T09:00:00Z" },
  });
}

describe("stub bus", () => {
  it("retries an attempt that times out, with the same bytes", async () => {
    bodies = [];
    answers = [() => undefined /* never answered */, accepted];
    const clock = new FakeClock();
    const client = new Client({ url, workspace: "newsroom", tokens: new StaticToken("t"), attemptTimeoutMs: 1000, clock });
    const m = event();
    const res = await client.publish(m);
    // The first attempt times out; a later one is answered (on a loaded
    // machine a retry may itself take past its second and be retried).
    assert.equal(res.status, 202);
    assert.ok(res.attempts >= 2, `attempts ${res.attempts}`);
    assert.deepEqual(bodies, Array(res.attempts).fill(m.text()));
    assert.equal(clock.waits.length, res.attempts - 1);
  });

  it("judges a proxy's HTML 502 by its status: retried", async () => {
    bodies = [];
    answers = [
      (res) => {
        res.writeHead(502, { "Content-Type": "text/html" });
        res.end("<html><body><h1>502 Bad Gateway</h1></body></html>");
      },
      accepted,
    ];
    const client = new Client({ url, workspace: "newsroom", tokens: new StaticToken("t"), clock: new FakeClock() });
    const res = await client.publish(event());
    assert.deepEqual([res.status, res.attempts], [202, 2]);
  });

  it("waits a Retry-After given as an HTTP date", async () => {
    const start = Date.UTC(2026, 10, 29, 9, 0, 0);
    answers = [
      (res) => {
        res.writeHead(503, { "Content-Type": "application/json", "Retry-After": new Date(start + 7000).toUTCString() });
        res.end('{"accepted":false,"violations":[{"source":"policy","rule":"bus.unavailable","message":"x"}],"request_id":"r"}');
      },
      accepted,
    ];
    const clock = new FakeClock(start);
    const client = new Client({ url, workspace: "newsroom", tokens: new StaticToken("t"), clock });
    await client.publish(event());
    assert.equal(clock.waits.length, 1);
    assert.ok(clock.waits[0]! >= 7000, `waited ${clock.waits[0]} ms`);
  });

  it("keeps nothing and says so without an outbox, after the attempts", async () => {
    answers = Array.from({ length: 3 }, () => (res: http.ServerResponse) => {
      res.writeHead(500);
      res.end();
    });
    const client = new Client({ url, workspace: "newsroom", tokens: new StaticToken("t"), clock: new FakeClock(), retry: { attempts: 3 } });
    const err = await client.publish(event()).catch((e: unknown) => e);
    assert.ok(err instanceof StorybusError);
    assert.deepEqual([err.status, err.attempts, err.kept], [500, 3, false]);
    assert.match(err.message, /not delivered yet, and not kept: no outbox$/);
  });
});
