package store_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

func TestParseSubjectIsTheInverseOfSubject(t *testing.T) {
	for _, key := range []string{"story-1", "a.b.c", "", "ünïcode/with spaces"} {
		subject := store.Subject("newsroom", "story-context", key)
		ws, family, got, ok := store.ParseSubject(subject)
		if !ok || ws != "newsroom" || family != "story-context" || got != key {
			t.Errorf("ParseSubject(%q) = %q %q %q %v, want newsroom story-context %q", subject, ws, family, got, ok, key)
		}
	}
	for _, subject := range []string{"", "som.newsroom.story-context", "som.newsroom.story-context.a.b", "other.newsroom.story-context.YQ", "som.newsroom.story-context.not base64!"} {
		if _, _, _, ok := store.ParseSubject(subject); ok {
			t.Errorf("ParseSubject(%q) accepted a subject Subject never makes", subject)
		}
	}
}

// TestConsumers: a consumer is created on first Open with the limits' ack
// wait (the default for 0), found again by its owner only, refused past
// the connection's limit, and Find never creates one.
func TestConsumers(t *testing.T) {
	_, st := storetest.Embedded(t)
	ctx := context.Background()
	if _, err := st.OpenWorkspace(ctx, "newsroom", 0, 0); err != nil {
		t.Fatal(err)
	}
	filters := []string{"som.newsroom.story-context.>"}
	ref := func(name, connection string) store.ConsumerRef {
		return store.ConsumerRef{Workspace: "newsroom", Name: name, Connection: connection}
	}
	log := slog.New(slog.DiscardHandler)

	cs := st.Consumers(store.ConsumerLimits{PerConnection: 2, AckWait: 3 * time.Second}, log)
	if _, err := cs.Find(ctx, ref("desk", "reader")); !errors.Is(err, store.ErrConsumerNotFound) {
		t.Fatalf("Find of a consumer never created: %v", err)
	}
	cons, err := cs.Open(ctx, ref("desk", "reader"), filters)
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.AckWait; got != 3*time.Second {
		t.Errorf("ack wait %s, want the limits' 3s", got)
	}
	if _, err := cs.Find(ctx, ref("desk", "reader")); err != nil {
		t.Errorf("Find of the owner's consumer: %v", err)
	}
	for _, open := range []func() error{
		func() error { _, err := cs.Open(ctx, ref("desk", "other"), filters); return err },
		func() error { _, err := cs.Find(ctx, ref("desk", "other")); return err },
	} {
		if err := open(); !errors.Is(err, store.ErrConsumerNameTaken) {
			t.Errorf("another connection's name: %v, want ErrConsumerNameTaken", err)
		}
	}
	if _, err := cs.Open(ctx, ref("web", "reader"), filters); err != nil {
		t.Fatal(err)
	}
	_, err = cs.Open(ctx, ref("third", "reader"), filters)
	if limit, ok := errors.AsType[*store.ConsumerLimitError](err); !ok || limit.Limit != 2 || limit.Connection != "reader" {
		t.Fatalf("a third consumer of a connection limited to 2: %v", err)
	}
	if _, err := st.JS.Consumer(ctx, store.StreamName("newsroom"), "third"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("the refused consumer exists: %v", err)
	}

	defaults := st.Consumers(store.ConsumerLimits{}, log)
	cons, err = defaults.Open(ctx, ref("any", "reader"), filters)
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.AckWait; got != store.DefaultAckWait {
		t.Errorf("ack wait %s with none set, want %s", got, store.DefaultAckWait)
	}
	if got := store.DefaultConsumerLimits().AckWait; got != store.DefaultAckWait {
		t.Errorf("DefaultConsumerLimits().AckWait = %s", got)
	}
}
