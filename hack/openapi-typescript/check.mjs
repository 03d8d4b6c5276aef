// make test-openapi-generators, TypeScript half: generate types from
// docs/openapi.yaml with openapi-typescript's default options, then have tsc
// (strict) check that every message of clients/conformance/scenarios.json,
// real messages of every family, is a SOMMessage; that the union narrows on
// message_type; and that messages SOM 1.0 refuses are type errors.
// Usage: node check.mjs [description], docs/openapi.yaml by default.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const bin = (name) => join(here, "node_modules", ".bin", name);
const run = (cmd, args) => execFileSync(cmd, args, { stdio: "inherit" });

const description = process.argv[2] ?? join(root, "docs", "openapi.yaml");
const scenarios = JSON.parse(readFileSync(join(root, "clients", "conformance", "scenarios.json"), "utf8"));
const messages = Object.entries(scenarios.messages);
const families = new Set(messages.map(([, m]) => m.message_type));
for (const t of ["story.context", "story.event", "asset.reference"]) {
  if (!families.has(t)) throw new Error(`clients/conformance/scenarios.json has no ${t} message to check`);
}

const dir = mkdtempSync(join(tmpdir(), "storybus-openapi-typescript-"));
try {
  run(bin("openapi-typescript"), [description, "-o", join(dir, "api.ts")]);

  const literal = (v) => JSON.stringify(v, null, 2);
  const context = messages.find(([, m]) => m.message_type === "story.context")[1];
  const event = messages.find(([, m]) => m.message_type === "story.event")[1];
  // On one line, so that the error is on the line its @ts-expect-error names.
  const with_ = (m, change) => JSON.stringify(change(structuredClone(m)));
  const source = `import type { components } from "./api";

type SOMMessage = components["schemas"]["SOMMessage"];
type Accepted = components["schemas"]["Accepted"];
type TokenResponse = components["schemas"]["TokenResponse"];

// Every message of the conformance scenarios, as the bus receives it.
${messages.map(([key, m], i) => `// ${key}\nexport const m${i}: SOMMessage = ${literal(m)};`).join("\n\n")}

// The union narrows on message_type to each family's payload.
export function describe(m: SOMMessage): string {
  switch (m.message_type) {
    case "story.context": {
      const n: number = m.payload.sequence_number;
      const state: "draft" | "ready" | "published" | "updated" | "unpublished" | "killed" = m.payload.state;
      return \`\${m.payload.story_id} #\${n} \${state}: \${m.payload.headline}\`;
    }
    case "story.event": {
      const details: { [key: string]: unknown } | undefined = m.payload.details;
      return \`\${m.payload.story_id} \${m.payload.event} \${Object.keys(details ?? {}).length}\`;
    }
    case "asset.reference":
      return \`\${m.payload.asset_id} \${m.payload.kind} \${m.payload.rights?.usage ?? ""}\`;
  }
}

export const accepted: Accepted = { accepted: true, message_id: "${context.message_id}", message_type: "story.context", family: "story-context", tolerated: [] };
export const token: TokenResponse = { access_token: "a.b.c", token_type: "Bearer", expires_in: 3600 };

// What SOM 1.0 refuses does not type-check.
// @ts-expect-error a payload member SOM 1.0 does not define
export const unknownMember: SOMMessage = ${with_(context, (m) => ((m.payload.subtitle = "x"), m))};
// @ts-expect-error a state that is not one of SOM's
export const badState: SOMMessage = ${with_(context, (m) => ((m.payload.state = "archived"), m))};
// @ts-expect-error a story.event's payload under message_type story.context
export const wrongFamily: SOMMessage = ${with_(event, (m) => ((m.message_type = "story.context"), m))};
// @ts-expect-error a story.event without occurred_at
export const missingMember: SOMMessage = ${with_(event, (m) => (delete m.payload.occurred_at, m))};
// @ts-expect-error another SOM version
export const badVersion: SOMMessage = ${with_(context, (m) => ((m.som_version = "2.0"), m))};
// @ts-expect-error an envelope member SOM 1.0 does not define
export const unknownEnvelope: SOMMessage = ${with_(context, (m) => ((m.priority = 1), m))};
// @ts-expect-error Accepted is always accepted
export const notAccepted: Accepted = { accepted: false, message_id: "x", message_type: "story.context", family: "story-context", tolerated: [] };
// @ts-expect-error a token type other than Bearer
export const badToken: TokenResponse = { access_token: "a.b.c", token_type: "MAC", expires_in: 3600 };
`;
  writeFileSync(join(dir, "messages.ts"), source);
  run(bin("tsc"), [
    "--noEmit", "--strict", "--target", "es2022", "--module", "preserve", "--moduleResolution", "bundler",
    join(dir, "api.ts"), join(dir, "messages.ts"),
  ]);
  console.log(`openapi-typescript: ${messages.length} messages of ${families.size} families type-check as SOMMessage; 8 refused ones do not`);
} catch (err) {
  // The tools have printed why; a stack trace of this script adds nothing.
  console.error(`openapi-typescript check failed: ${err.message.split("\n")[0]}`);
  process.exitCode = 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
