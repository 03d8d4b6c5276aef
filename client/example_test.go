package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/client"
	"github.com/storybus/storybus/config/samples"
)

// sandbox starts a bus for an example: a real one, on an embedded
// JetStream in a temporary directory, serving `storybus dev`'s sample
// workspace "newsroom" with its connections cms and wire. While
// TestDocsRunInSequence runs, it is that test's bus instead, which the
// examples share.
func sandbox() (url string, stop func()) {
	if docsBus != nil {
		return docsBus.URL, func() {}
	}
	b, err := startSampleBus()
	if err != nil {
		log.Fatal(err)
	}
	return b.URL, b.Close
}

// A producer publishes a snapshot, resends it as after a lost answer, and
// handles a refusal by its status and rule.
func Example_producer() {
	busURL, stop := sandbox()
	defer stop()
	secret := samples.CMSSecret
	outboxDir, _ := os.MkdirTemp("", "outbox-")
	defer os.RemoveAll(outboxDir)

	// A client for the workspace, with the connection's credentials and
	// an outbox on disk for the messages it cannot deliver.
	outbox, err := client.OpenOutbox(outboxDir)
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New(client.Options{
		URL:       busURL,
		Workspace: "newsroom",
		Tokens: &client.ClientCredentials{
			URL: busURL, Workspace: "newsroom", ClientID: "cms", ClientSecret: secret,
		},
		Outbox: outbox,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Build the message once and keep it: every retry sends these bytes.
	snapshot, err := client.Build(client.Envelope{
		MessageID:   "9b2e4f71-0c3d-4a5b-8e6f-7a8b9c0d1e2f",
		MessageType: "story.context",
		SystemID:    "cms",
		Timestamp:   time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC),
		Payload: map[string]any{
			"story_id": "story-0002", "sequence_number": 2, "state": "ready",
			"headline": "Council approves new harbour bridge",
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Publish(ctx, snapshot)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status, res.Duplicate, res.Tolerated[0].Rule)

	// The same message again, as after a lost answer: already published.
	res, err = c.Publish(ctx, snapshot)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status, res.Duplicate)

	// An older snapshot of the story is refused. Branch on status and
	// rule: rebuild from current state with a new message_id.
	older, err := client.Build(client.Envelope{
		MessageType: "story.context",
		SystemID:    "cms",
		Payload: map[string]any{
			"story_id": "story-0002", "sequence_number": 1, "state": "draft",
			"headline": "Harbour bridge vote today",
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Publish(ctx, older)
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Rule, e.Rebuild(), e.Kept)
		fmt.Println(e.UserMessage())
	}
	// Output:
	// 202 false sequence.start
	// 200 true
	// 409 sequence.stale true false
	// Someone else changed this story.
}

// A consumer handles every message once, by message_id, and acknowledges
// it.
func Example_consumer() {
	busURL, stop := sandbox()
	defer stop()
	secret := samples.WireSecret
	publishSample(busURL)

	consumer, err := client.NewConsumer(client.ConsumerOptions{
		URL:       busURL,
		Workspace: "newsroom",
		Name:      "website",
		Families:  []string{"story-context"},
		Tokens: &client.ClientCredentials{
			URL: busURL, Workspace: "newsroom", ClientID: "wire", ClientSecret: secret,
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Run pulls, drops duplicates, and acknowledges what the handler
	// handled; a handler error leaves the message to be delivered again.
	err = consumer.Run(ctx, func(ctx context.Context, d client.Delivery) error {
		var snapshot struct {
			Payload struct {
				StoryID  string `json:"story_id"`
				Sequence int    `json:"sequence_number"`
				Headline string `json:"headline"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(d.Message, &snapshot); err != nil {
			return err
		}
		fmt.Println(d.MessageID, d.Family, d.Delivery)
		fmt.Println(snapshot.Payload.StoryID, snapshot.Payload.Sequence, snapshot.Payload.Headline)
		cancel() // one message is enough for the example
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// 6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20 story-context 1
	// story-0001 1 Council approves new harbour bridge
}

// A consumer reading the topic straight from NATS, with the client's
// de-duplicator.
func Example_nats() {
	b := docsBus
	if b == nil {
		var err error
		if b, err = startSampleBus("127.0.0.1:-1"); err != nil {
			log.Fatal(err)
		}
		defer b.Close()
	}
	natsURL := b.ns.ClientURL()
	publishSample(b.URL)

	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// A durable pull consumer with explicit acks on the workspace's
	// stream, for snapshots only, under a name of its own.
	consumer, err := js.CreateOrUpdateConsumer(ctx, "som-newsroom", jetstream.ConsumerConfig{
		Durable:        "nats-website",
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		FilterSubjects: []string{"som.newsroom.story-context.>"},
	})
	if err != nil {
		log.Fatal(err)
	}
	dedup := client.NewDedup(0, 0, nil)
	batch, err := consumer.Fetch(10, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	for m := range batch.Messages() {
		id := m.Headers().Get("Nats-Msg-Id")
		if !dedup.Seen(id) {
			fmt.Println(id, m.Subject(), m.Headers().Get("Storybus-Sequence"))
			dedup.Done(id)
		}
		if err := m.Ack(); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// 6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20 som.newsroom.story-context.c3RvcnktMDAwMQ 1
}

// publishSample publishes the sample snapshot that `storybus dev`'s curl
// pair publishes: after that pair, a duplicate.
func publishSample(busURL string) {
	c, err := client.New(client.Options{URL: busURL, Workspace: "newsroom",
		Tokens: &client.ClientCredentials{URL: busURL, Workspace: "newsroom", ClientID: samples.CMSClientID, ClientSecret: samples.CMSSecret}})
	if err != nil {
		log.Fatal(err)
	}
	m, err := client.NewMessage([]byte(samples.MessageSample))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Publish(context.Background(), m); err != nil {
		log.Fatal(err)
	}
}

// What a newsroom user reads for each class of failure.
func ExampleError_UserMessage() {
	for _, e := range []*client.Error{
		{Status: 400, Rule: "story-context.required", Violations: []client.Violation{{Source: "schema", Rule: "story-context.required", Path: "/payload/headline"}}},
		{Status: 403, Rule: "grant.message_type"},
		{Status: 409, Rule: "sequence.stale"},
		{Status: 409, Rule: "sequence.terminal"},
		{Status: 503, Rule: "bus.publish_failed", Attempts: 10, Kept: true},
	} {
		fmt.Printf("%d %s: %s\n", e.Status, e.Class(), e.UserMessage())
	}
	// Output:
	// 400 invalid: This story couldn't be shared with other systems: payload.headline is invalid.
	// 403 not-allowed: This system isn't allowed to publish that.
	// 409 story-changed: Someone else changed this story.
	// 409 story-killed: This story was killed and can't be reopened.
	// 503 not-delivered: Other systems haven't received the latest version yet. Retrying.
}
