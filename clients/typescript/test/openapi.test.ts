// The wire types: src/openapi.ts is what openapi-typescript generates from
// docs/openapi.yaml today, and a message of every family that type-checks
// against them is one the bus accepts.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  build,
  Client,
  ClientCredentials,
  type Envelope,
  newMessage,
  type SOMMessage,
} from "@storybus/client";
import { type Bus, CMS_SECRET, packageDir, repoDir, startDev, WORKSPACE } from "./support/bus.js";

// These type-check only while the generated types describe real messages:
// `npm test` compiles this file before it runs.
const messages: SOMMessage[] = [
  {
    som_version: "1.0",
    message_id: "c1a2b3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d",
    message_type: "story.context",
    system_id: "cms",
    timestamp: "2026-11-29T09:00:00Z",
    correlation_id: "d2b3c4e5-f6a7-4b8c-9d0e-1f2a3b4c5d6e",
    payload: {
      story_id: "ts-types-1",
      sequence_number: 1,
      state: "published",
      headline: "Council approves new harbour bridge",
      slug: "harbour-bridge",
      desk: "local",
      language: "en-GB",
      embargo_until: "2026-11-29T10:00:00Z",
      body_ref: "https://cms.example.org/stories/ts-types-1/body",
      assets: [{ ref: "https://dam.example.org/a/1.jpg", kind: "image", caption: "The harbour" }],
      authors: ["A. Writer"],
      labels: ["council"],
    },
  },
  {
    som_version: "1.0",
    message_id: "e3c4d5f6-a7b8-4c9d-8e0f-2a3b4c5d6e7f",
    message_type: "story.event",
    system_id: "cms",
    timestamp: "2026-11-29T09:01:00Z",
    payload: { story_id: "ts-types-1", event: "corrected", occurred_at: "2026-11-29T09:01:00Z", details: { field: "headline" } },
  },
  {
    som_version: "1.0",
    message_id: "f4d5e6a7-b8c9-4d0e-9f1a-3b4c5d6e7f80",
    message_type: "asset.reference",
    system_id: "cms",
    timestamp: "2026-11-29T09:02:00Z",
    payload: {
      asset_id: "ts-types-asset-1",
      ref: "https://dam.example.org/a/1.jpg",
      kind: "image",
      story_ids: ["ts-types-1"],
      rights: { usage: "editorial", expires_at: "2027-11-29T00:00:00Z" },
    },
  },
];

// And what is not a message does not: if the types grew loose, these
// directives would be unused, which fails the compilation.
export const notMessages: SOMMessage[] = [
  // @ts-expect-error a state SOM 1.0 does not have
  { ...messages[0]!, payload: { story_id: "s", sequence_number: 1, state: "final", headline: "h" } },
  // @ts-expect-error a story.event payload under story.context
  { ...messages[0]!, payload: { story_id: "s", event: "published", occurred_at: "2026-11-29T09:00:00Z" } },
  // @ts-expect-error a member the envelope does not have
  { ...messages[1]!, priority: 1 },
];

const envelopes: Envelope[] = [
  { messageType: "story.event", systemId: "cms", payload: { story_id: "ts-types-2", event: "published", occurred_at: "2026-11-29T09:00:00Z" } },
  { messageType: "asset.reference", systemId: "cms", payload: { asset_id: "ts-types-asset-2", ref: "https://dam.example.org/a/2.jpg", kind: "video" } },
];

describe("wire types", () => {
  let bus: Bus;
  let dir: string;

  before(async () => {
    bus = await startDev();
    dir = mkdtempSync(path.join(os.tmpdir(), "storybus-ts-openapi-"));
  });

  after(async () => {
    await bus?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("are what openapi-typescript generates from docs/openapi.yaml (npm run generate)", () => {
    const out = path.join(dir, "openapi.ts");
    execFileSync(
      path.join(packageDir, "node_modules", ".bin", "openapi-typescript"),
      [path.join(repoDir, "docs", "openapi.yaml"), "-o", out],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    const committed = readFileSync(path.join(packageDir, "src", "openapi.ts"), "utf8");
    assert.ok(
      readFileSync(out, "utf8") === committed,
      "src/openapi.ts differs from what docs/openapi.yaml generates: run npm run generate in clients/typescript",
    );
  });

  it("type a message of every family the bus accepts", async () => {
    const client = new Client({
      url: bus.url,
      workspace: WORKSPACE,
      tokens: new ClientCredentials({ url: bus.url, workspace: WORKSPACE, clientId: "cms", clientSecret: CMS_SECRET }),
    });
    for (const m of [...messages.map((m) => newMessage(JSON.stringify(m))), ...envelopes.map(build)]) {
      const res = await client.publish(m);
      assert.equal(res.status, 202, `${m.type}: ${JSON.stringify(res.tolerated)}`);
    }
  });
});
