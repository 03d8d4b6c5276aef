package pool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/internal/testutil"
)

// TestPooledTopicLimits: the topic limits of a pooled document are the
// workspace's stream's limits once the document is in force, whichever
// replica publishes: two messages are accepted, the third refused 507 on
// either replica; a document with a higher limit raises it without a
// restart, and one with a retention (topic.maxAge) gives the stream its
// MaxAge; and a document with a limit out of bounds is refused by the
// replicas with the field named, the previous limits staying in force.
func TestPooledTopicLimits(t *testing.T) {
	_, st := storetest.Embedded(t)
	ctx := context.Background()
	p, err := pool.Open(ctx, st.JS, "shared", 1)
	if err != nil {
		t.Fatal(err)
	}
	o := bus.Options{Store: st, RequestTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	a, b := startReplica(t, p, o, "a"), startReplica(t, p, o, "b")
	put := func(maxMessages int64, maxBytes string, maxAge time.Duration) string {
		t.Helper()
		w := workspace("brand")
		w.Topic.MaxMessages = maxMessages
		q := resource.MustParse(maxBytes)
		w.Topic.MaxBytes = &q
		w.Topic.MaxAge.Duration = maxAge
		return putInForce(t, p, w, "a", "b")
	}
	limits := func() (int64, int64) {
		t.Helper()
		s, err := st.JS.Stream(ctx, store.StreamName("brand"))
		if err != nil {
			t.Fatal(err)
		}
		c := s.CachedInfo().Config
		return c.MaxMsgs, c.MaxBytes
	}

	put(2, "64Mi", 0)
	if msgs, bytes := limits(); msgs != 2 || bytes != 64<<20 {
		t.Fatalf("topic limits %d messages, %d bytes; want 2 and 64Mi", msgs, bytes)
	}
	for _, r := range []*replica{a, b} {
		if s := r.publish(t, "brand"); s != http.StatusAccepted {
			t.Fatalf("publish under the limit: %d", s)
		}
	}
	for _, r := range []*replica{a, b} {
		if s := r.publish(t, "brand"); s != http.StatusInsufficientStorage {
			t.Fatalf("publish to the full topic: %d, want 507", s)
		}
	}

	put(3, "64Mi", 0)
	if msgs, _ := limits(); msgs != 3 {
		t.Fatalf("raised topic limit: %d messages, want 3", msgs)
	}

	// A retention of its own, in force on the stream once the replicas
	// report the document.
	month := 30 * 24 * time.Hour
	put(3, "64Mi", month)
	topic, err := st.JS.Stream(ctx, store.StreamName("brand"))
	if err != nil {
		t.Fatal(err)
	}
	if got := topic.CachedInfo().Config.MaxAge; got != month {
		t.Fatalf("the topic's retention %s, want %s", got, month)
	}
	if s := b.publish(t, "brand"); s != http.StatusAccepted {
		t.Fatalf("publish after the limit was raised: %d", s)
	}

	bad := workspace("brand")
	bad.Topic.MaxMessages = -5
	raw, _ := json.Marshal(bad)
	if _, err := p.Documents.Put(ctx, "brand", raw); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the out-of-bounds limit refused on both replicas", 30*time.Second, func() error {
		got, err := p.StatusesOf(ctx, "brand")
		if err != nil {
			return err
		}
		for _, name := range []string{"a", "b"} {
			if got[name].Refused == "" || !strings.Contains(got[name].Error, "topic.maxMessages -5 must be between 1 and") {
				return fmt.Errorf("replica %s reports %+v", name, got[name])
			}
		}
		return nil
	})
	if msgs, bytes := limits(); msgs != 3 || bytes != 64<<20 {
		t.Fatalf("after a refused document the topic limits are %d messages, %d bytes; want 3 and 64Mi", msgs, bytes)
	}
}
