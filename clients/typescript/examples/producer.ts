import { build, Client, ClientCredentials, openOutbox, StorybusError } from "@storybus/client";

// storybus dev's publish port and the development secret of its
// connection cms.
const busURL = process.env.STORYBUS_URL || "http://127.0.0.1:8080";
const secret = process.env.STORYBUS_CLIENT_SECRET || "cms-dev-secret-0123456789abcdef0";

// A client for the workspace, with the connection's credentials and an
// outbox on disk for the messages it cannot deliver.
const client = new Client({
  url: busURL,
  workspace: "newsroom",
  tokens: new ClientCredentials({ url: busURL, workspace: "newsroom", clientId: "cms", clientSecret: secret }),
  outbox: await openOutbox(process.env.STORYBUS_OUTBOX || "outbox"),
});

// Build the message once and keep it: every retry sends these bytes.
const snapshot = build({
  messageId: "4d7a1c3e-9f2b-4e6a-8c5d-1b0e3f7a9c24",
  messageType: "story.context",
  systemId: "cms",
  timestamp: new Date("2026-11-29T09:00:00Z"),
  payload: { story_id: "story-0003", sequence_number: 2, state: "ready", headline: "Council approves new harbour bridge" },
});
let res = await client.publish(snapshot);
console.log(res.status, res.duplicate, res.tolerated[0]?.rule);

// The same message again, as after a lost answer: already published.
res = await client.publish(snapshot);
console.log(res.status, res.duplicate);

// An older snapshot of the story is refused. Branch on status and rule:
// rebuild from current state with a new message_id.
const older = build({
  messageType: "story.context",
  systemId: "cms",
  payload: { story_id: "story-0003", sequence_number: 1, state: "draft", headline: "Harbour bridge vote today" },
});
try {
  await client.publish(older);
} catch (err) {
  if (!(err instanceof StorybusError)) throw err;
  console.log(err.status, err.rule, err.rebuild(), err.kept);
  console.log(err.userMessage());
}
