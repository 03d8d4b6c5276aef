package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/api/resource"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

// TestTopicLimits: a topic at its MaxMsgs or MaxBytes refuses the next
// publish with an error IsFull knows (and Classify calls a definite
// failure), keeping every message it held; a raised limit, set by opening
// the workspace again, takes the same publish; a limit lowered under what
// the topic holds removes nothing.
func TestTopicLimits(t *testing.T) {
	_, st := storetest.Embedded(t)
	ctx := context.Background()
	open := func(l store.TopicLimits) *store.Workspace {
		t.Helper()
		ws, err := st.OpenWorkspace(ctx, "newsroom", 7*24*time.Hour, 0, store.WithTopicLimits(l))
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	n := 0
	publish := func(size int) error {
		n++
		m := &nats.Msg{Subject: store.Subject("newsroom", "story-event", "s1"), Data: bytes.Repeat([]byte("x"), size), Header: nats.Header{}}
		m.Header.Set(nats.MsgIdHdr, fmt.Sprint("m", n))
		_, err := st.JS.PublishMsg(ctx, m)
		if err != nil {
			n-- // the same message is sent again
		}
		return err
	}
	state := func(ws *store.Workspace) jetstream.StreamState {
		t.Helper()
		info, err := ws.Stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State
	}
	full := func(err error, what string) {
		t.Helper()
		if !store.IsFull(err) {
			t.Fatalf("%s: %v, want a full topic", what, err)
		}
		if k := store.Classify(err); k != store.KindDefiniteFailure {
			t.Fatalf("%s: classified %v", what, k)
		}
	}

	ws := open(store.TopicLimits{MaxMsgs: 3})
	if c := ws.Stream.CachedInfo().Config; c.MaxMsgs != 3 || c.MaxBytes != -1 || c.Discard != jetstream.DiscardNew {
		t.Fatalf("topic config: MaxMsgs %d, MaxBytes %d, Discard %v", c.MaxMsgs, c.MaxBytes, c.Discard)
	}
	for range 3 {
		if err := publish(100); err != nil {
			t.Fatal(err)
		}
	}
	full(publish(100), "a fourth message under MaxMsgs 3")
	if s := state(ws); s.Msgs != 3 || s.FirstSeq != 1 {
		t.Fatalf("full topic holds %d messages from %d, want the 3 accepted from 1", s.Msgs, s.FirstSeq)
	}

	if c := open(store.TopicLimits{MaxMsgs: 4}).Stream.CachedInfo().Config; c.MaxMsgs != 4 {
		t.Fatalf("raised MaxMsgs: %d", c.MaxMsgs)
	}
	if err := publish(100); err != nil {
		t.Fatalf("after raising MaxMsgs to 4: %v", err)
	}

	// Bytes: 1 MiB holds three messages of 300,000 bytes, not four.
	ws = open(store.TopicLimits{MaxBytes: 1 << 20})
	if c := ws.Stream.CachedInfo().Config; c.MaxMsgs != -1 || c.MaxBytes != 1<<20 {
		t.Fatalf("topic config: MaxMsgs %d, MaxBytes %d", c.MaxMsgs, c.MaxBytes)
	}
	accepted := 4
	for {
		err := publish(300_000)
		if err != nil {
			full(err, "a message over MaxBytes")
			break
		}
		if accepted++; accepted > 10 {
			t.Fatal("1 MiB took more than six messages of 300,000 bytes")
		}
	}
	s := state(ws)
	if s.Msgs != uint64(accepted) || s.FirstSeq != 1 || s.Bytes > 1<<20 {
		t.Fatalf("full topic holds %d messages (%d bytes) from %d, want the %d accepted, at most 1 MiB", s.Msgs, s.Bytes, s.FirstSeq, accepted)
	}
	if accepted != 7 {
		t.Errorf("accepted %d messages, want 4 small ones and 3 of 300,000 bytes", accepted)
	}

	// Lowered under what it holds: nothing is removed, the next is refused.
	ws = open(store.TopicLimits{MaxMsgs: 2, MaxBytes: 1 << 20})
	full(publish(10), "a message over a lowered MaxMsgs")
	if s := state(ws); s.Msgs != uint64(accepted) || s.FirstSeq != 1 {
		t.Fatalf("after lowering the limits the topic holds %d messages from %d, want %d from 1", s.Msgs, s.FirstSeq, accepted)
	}
	// Unset again: unbounded.
	ws = open(store.TopicLimits{})
	if err := publish(300_000); err != nil {
		t.Fatalf("without limits: %v", err)
	}
	if c := ws.Stream.CachedInfo().Config; c.MaxMsgs != -1 || c.MaxBytes != -1 {
		t.Fatalf("limits left after unsetting: MaxMsgs %d, MaxBytes %d", c.MaxMsgs, c.MaxBytes)
	}
}

// TestOtherStoreFailuresAreNotAFullTopic: IsFull knows a full topic
// by its code and nats-server's own description, not any 10077.
func TestOtherStoreFailuresAreNotAFullTopic(t *testing.T) {
	for _, err := range []error{
		nil,
		errors.New("maximum bytes exceeded"),
		fmt.Errorf("nats: %w", &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "message size exceeds maximum allowed"}),
		fmt.Errorf("nats: %w", &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages per subject exceeded"}),
		fmt.Errorf("nats: %w", &jetstream.APIError{Code: 500, ErrorCode: 10047, Description: "maximum bytes exceeded"}),
	} {
		if store.IsFull(err) {
			t.Errorf("IsFull(%v)", err)
		}
	}
	if err := fmt.Errorf("publish: %w", fmt.Errorf("nats: %w", &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"})); !store.IsFull(err) {
		t.Errorf("IsFull(%v) = false", err)
	}
}

// TestOpenConfigured: a workspace opened from its configuration has the
// configuration's idempotency window, topic limits and retention, and the
// retention given when the configuration sets none; a Store made Over
// another connection, as the operator makes one, opens it alike.
func TestOpenConfigured(t *testing.T) {
	srv, st := storetest.Embedded(t)
	ctx := context.Background()
	week, month := 7*24*time.Hour, 30*24*time.Hour
	cfg := func(id string, maxAge time.Duration) *config.Workspace {
		w := &config.Workspace{ID: id, Topic: config.TopicLimits{MaxMessages: 500}}
		w.IdempotencyWindow.Duration = 48 * time.Hour
		w.Topic.MaxAge.Duration = maxAge
		w.Topic.MaxBytes = new(resource.MustParse("1Mi"))
		return w
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	over := store.Over(nc, js, store.Options{Replicas: 1})
	for _, c := range []struct {
		st        *store.Store
		id        string
		maxAge    time.Duration
		retention time.Duration
		want      time.Duration
	}{
		{st, "own-age", month, week, month},
		{st, "bus-age", 0, week, week},
		{over, "over", month, 0, month},
	} {
		ws, err := c.st.OpenConfigured(ctx, cfg(c.id, c.maxAge), c.retention)
		if err != nil {
			t.Fatal(err)
		}
		info, err := ws.Stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s := info.Config; s.MaxMsgs != 500 || s.MaxBytes != 1<<20 || s.MaxAge != c.want {
			t.Errorf("%s: max messages %d, max bytes %d, max age %s; want 500, %d and %s", c.id, s.MaxMsgs, s.MaxBytes, s.MaxAge, 1<<20, c.want)
		}
		rs, err := ws.Records.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rs.TTL() != 48*time.Hour {
			t.Errorf("%s: records kept %s, want the window, 48h", c.id, rs.TTL())
		}
	}
}
