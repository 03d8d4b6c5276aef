package pool_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
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
