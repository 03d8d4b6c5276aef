import { ClientCredentials, Consumer } from "@storybus/client";

// storybus dev's publish port and the development secret of its
// connection wire, which may consume snapshots.
const busURL = process.env.STORYBUS_URL || "http://127.0.0.1:8080";
const secret = process.env.STORYBUS_CLIENT_SECRET || "wire-dev-secret-0123456789abcdef";

const consumer = new Consumer({
  url: busURL,
  workspace: "newsroom",
  name: "website-ts",
  families: ["story-context"],
  tokens: new ClientCredentials({ url: busURL, workspace: "newsroom", clientId: "wire", clientSecret: secret }),
});

// run pulls, drops duplicates, and acknowledges what the handler
// handled; a handler that throws leaves the message to be delivered again.
const stop = new AbortController();
await consumer.run(
  (d) => {
    // message_type tells the families' types apart.
    if (d.message.message_type !== "story.context") return;
    const { story_id, sequence_number, headline } = d.message.payload;
    console.log(d.messageId, d.family, d.delivery);
    console.log(story_id, sequence_number, headline);
    stop.abort(); // one message is enough for the example
  },
  { signal: stop.signal },
);
