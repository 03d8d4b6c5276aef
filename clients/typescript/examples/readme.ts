import { randomUUID } from "node:crypto";
import { build, Client, ClientCredentials, openOutbox } from "@storybus/client";

const url = process.env.STORYBUS_URL || "http://127.0.0.1:8080"; // storybus dev
const client = new Client({
  url,
  workspace: "newsroom",
  tokens: new ClientCredentials({ url, workspace: "newsroom", clientId: "cms", clientSecret: "cms-dev-secret-0123456789abcdef0" }),
  outbox: await openOutbox("outbox"),
});
// A new story on every run: its first snapshot is sequence_number 1.
const res = await client.publish(
  build({
    messageType: "story.context",
    systemId: "cms",
    payload: { story_id: `story-${randomUUID()}`, sequence_number: 1, state: "draft", headline: "Harbour bridge vote today" },
  }),
);
console.log(res.status, res.duplicate);
