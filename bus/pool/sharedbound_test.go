package pool_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/rules"
)

// TestAFullTopicBoundsItsSharedRecords: a pooled workspace writes a
// record in the shared records bucket only for a message its topic
// accepted, so its topic's limit bounds its keys there too: past the
// limit its publishes are refused 507 and it has as many records as
// messages accepted, however many more it sends. Its limit counters are
// keys per connection and per source address of its token requests,
// whatever the number of messages.
func TestAFullTopicBoundsItsSharedRecords(t *testing.T) {
	st, err := store.Connect(store.Options{URL: storetest.Listening(t).ClientURL(), SharedBuckets: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx := context.Background()
	p, err := pool.Open(ctx, st.JS, "shared", 1)
	if err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, p, bus.Options{Store: st, RequestTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}, "a")
	w := workspace("brand")
	w.Topic.MaxMessages = 3
	w.Connections[0].Limits = &v1alpha1.Limits{RatePerSecond: 100, Burst: 100, DailyQuota: 1000}
	putInForce(t, p, w, "a")

	accepted := 0
	for range 12 {
		switch s := r.publish(t, "brand"); s {
		case http.StatusAccepted:
			accepted++
		case http.StatusInsufficientStorage:
		default:
			t.Fatalf("publish: %d, want 202 or 507", s)
		}
	}
	if accepted != 3 {
		t.Fatalf("%d accepted, want the topic's 3", accepted)
	}
	keysOf := func(bucket string) []string {
		t.Helper()
		kv, err := st.JS.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		lister, err := kv.ListKeysFiltered(ctx, store.SharedKeyPrefix("brand")+">")
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		return keys
	}
	if keys := keysOf(store.SharedRecordsBucket(w.IdempotencyWindow.Duration)); len(keys) != accepted {
		t.Fatalf("the workspace has %d records in the shared bucket after %d accepted and 9 refused: %v", len(keys), accepted, keys)
	}
	// One counter per connection (c.<connection>) and one per client and
	// source address its token requests came from (a.…): 12 publishes
	// from one address are one of each.
	limits := keysOf(store.SharedLimitsBucket)
	kinds := map[string]int{}
	for _, k := range limits {
		kind, _, _ := strings.Cut(strings.TrimPrefix(k, store.SharedKeyPrefix("brand")), ".")
		kinds[kind]++
	}
	if len(limits) != 2 || kinds["c"] != 1 || kinds["a"] != 1 {
		t.Errorf("limit counters after 12 publishes of one connection from one address: %v, want one connection's and one address's", limits)
	}
}

// TestSharedRecordsBound: a pool whose shared records buckets are bounded
// refuses, once its bucket is full, every new message 507
// workspace.storage_full with no Retry-After, records and publishes
// nothing for it, and keeps what it accepted: each accepted message is
// on the topic and has its record, and its retry is still answered a
// duplicate. A larger bound asked for by another store lets new messages
// in; a store that asks for none leaves the bound as it is.
//
// It runs on one server and on a three-node cluster with R3 buckets, where
// the bound is enforced before a write is proposed, without the single
// server's leave to replace a key of a full bucket.
func TestSharedRecordsBound(t *testing.T) {
	t.Run("one server", func(t *testing.T) {
		sharedRecordsBound(t, storetest.Listening(t).ClientURL(), 1)
	})
	t.Run("three-node cluster", func(t *testing.T) {
		sharedRecordsBound(t, storetest.StartCluster(t, storetest.NATSServer(t, "../.."), 3).URL(), 3)
	})
}

func sharedRecordsBound(t *testing.T, url string, replicas int) {
	const bound = 8 << 10 // a few dozen records
	st, err := store.Connect(store.Options{URL: url, Replicas: replicas, SharedBuckets: true, SharedRecordsMaxBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx := context.Background()
	p, err := pool.Open(ctx, st.JS, "bounded", replicas)
	if err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, p, bus.Options{Store: st, RequestTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}, "a")
	w := workspace("brand")
	putInForce(t, p, w, "a")
	token, status := r.token(t, "brand")
	if status != http.StatusOK {
		t.Fatalf("token: %d", status)
	}

	var accepted []string
	full := false
	for range 1000 {
		id := uuid.NewString()
		a := r.post(t, "brand", token, event(id))
		if a.status == http.StatusAccepted {
			accepted = append(accepted, id)
			continue
		}
		if a.status != http.StatusInsufficientStorage || a.rule != rules.WorkspaceStorageFull || a.retryAfter != "" {
			t.Fatalf("publish %d: %+v, want 202, or 507 %s without Retry-After", len(accepted)+1, a, rules.WorkspaceStorageFull)
		}
		full = true
		break
	}
	if !full || len(accepted) < 3 {
		t.Fatalf("%d accepted before the bucket of %d bytes was full (full: %v)", len(accepted), bound, full)
	}
	t.Logf("%d messages accepted before the bucket of %d bytes was full", len(accepted), bound)
	for range 3 {
		if a := r.post(t, "brand", token, event(uuid.NewString())); a.status != http.StatusInsufficientStorage || a.rule != rules.WorkspaceStorageFull {
			t.Fatalf("another new message on a full bucket: %+v", a)
		}
	}
	// What was accepted is kept, and a retry of it is still a duplicate.
	if a := r.post(t, "brand", token, event(accepted[0])); a.status != http.StatusOK {
		t.Fatalf("retry of an accepted message on a full bucket: %+v, want 200 (a duplicate)", a)
	}
	topic, err := st.JS.Stream(ctx, store.StreamName("brand"))
	if err != nil {
		t.Fatal(err)
	}
	if n := topic.CachedInfo().State.Msgs; n != uint64(len(accepted)) {
		t.Fatalf("the topic holds %d messages, %d were accepted", n, len(accepted))
	}
	bucket := store.SharedRecordsBucket(w.IdempotencyWindow.Duration)
	records := func() jetstream.StreamConfig {
		t.Helper()
		s, err := st.JS.Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config
	}
	kv, err := st.JS.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := kv.Status(ctx); err != nil || s.Values() != uint64(len(accepted)) {
		t.Fatalf("records: %v (%v), want the %d accepted", s, err, len(accepted))
	}

	// Another store asks for a larger bound: the bucket takes it, and new
	// messages are accepted again. One that asks for none changes nothing.
	for _, asked := range []int64{1 << 20, 0} {
		other, err := store.Connect(store.Options{URL: url, Replicas: replicas, SharedBuckets: true, SharedRecordsMaxBytes: asked})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.OpenConfigured(ctx, workspace("other"), 0); err != nil {
			t.Fatal(err)
		}
		other.Close()
		if got := records().MaxBytes; got != 1<<20 {
			t.Fatalf("after a store asked for %d: the bucket's bound is %d, want %d", asked, got, 1<<20)
		}
	}
	if a := r.post(t, "brand", token, event(uuid.NewString())); a.status != http.StatusAccepted {
		t.Fatalf("a new message once the bound is raised: %+v", a)
	}
}
