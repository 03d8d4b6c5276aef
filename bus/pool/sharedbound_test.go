package pool_test

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/som"
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
// whatever the number of messages. The records of the refused messages
// are removed, and their markers expire within seconds.
func TestAFullTopicBoundsItsSharedRecords(t *testing.T) {
	st, p := openPool(t, store.Options{URL: storetest.Listening(t).ClientURL(), SharedBuckets: true}, "shared")
	ctx := context.Background()
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
	bucket := store.SharedRecordsBucket(w.IdempotencyWindow.Duration)
	if keys := keysOf(bucket); len(keys) != accepted {
		t.Fatalf("the workspace has %d records in the shared bucket after %d accepted and 9 refused: %v", len(keys), accepted, keys)
	}
	// Each refused message's record was removed, and the removal's marker
	// expires in a second (store.RemovedRecordTTL), not at the end of the
	// window: refused messages hold no room under the bucket's bound.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		s, err := st.JS.Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().State.Msgs; n == uint64(accepted) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the shared bucket holds %d messages 20 s after %d accepted and 9 refused: the removals' markers stay", n, accepted)
		}
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
	st, p := openPool(t, store.Options{URL: url, Replicas: replicas, SharedBuckets: true, SharedRecordsMaxBytes: bound}, "bounded")
	ctx := context.Background()
	storeClock := &aheadClock{}
	metrics := bus.NewMetrics()
	r := startReplica(t, p, bus.Options{Store: st, StoreClock: storeClock, Metrics: metrics, RequestTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}, "a")
	w := workspace("brand")
	putInForce(t, p, w, "a")
	token, status := r.token(t, "brand")
	if status != http.StatusOK {
		t.Fatalf("token: %d", status)
	}

	// On a cluster a write in flight (a mark) counts against the bound
	// until it is applied, so a new message refused at the edge may be
	// accepted a moment later: the bucket is full when three in a row are
	// refused.
	var accepted []string
	refused := 0
	for try := 0; refused < 3; try++ {
		if try == 1000 {
			t.Fatalf("%d accepted and not full: the bucket of %d bytes does not bound its records", len(accepted), bound)
		}
		id := uuid.NewString()
		switch a := r.post(t, "brand", token, storyEvent(id)); {
		case a.status == http.StatusAccepted:
			accepted = append(accepted, id)
			refused = 0
		case a.status == http.StatusInsufficientStorage && a.rule == rules.WorkspaceStorageFull && a.retryAfter == "":
			refused++
		default:
			t.Fatalf("publish %d: %+v, want 202, or 507 %s without Retry-After", try+1, a, rules.WorkspaceStorageFull)
		}
	}
	if len(accepted) < 3 {
		t.Fatalf("%d accepted before the bucket of %d bytes was full", len(accepted), bound)
	}
	t.Logf("%d messages accepted before the bucket of %d bytes was full", len(accepted), bound)
	// What was accepted is kept, and a retry of it is still a duplicate.
	if a := r.post(t, "brand", token, storyEvent(accepted[0])); a.status != http.StatusOK {
		t.Fatalf("retry of an accepted message on a full bucket: %+v, want 200 (a duplicate)", a)
	}
	// The last message accepted left less room than its mark needs (a
	// record marked published is a little larger, and on a cluster the
	// bound is checked before any write), so its record stays "recorded".
	// Its retry waits out the lease, then is a duplicate: not refused as
	// new, not an outage, not published twice.
	last := accepted[len(accepted)-1]
	if a := r.post(t, "brand", token, storyEvent(last)); a.status != http.StatusOK && a.rule != rules.MessageInFlight {
		t.Fatalf("retry of the last accepted message on a full bucket: %+v, want 200 or 503 %s", a, rules.MessageInFlight)
	}
	storeClock.ahead.Store(int64(publish.Lease))
	if a := r.post(t, "brand", token, storyEvent(last)); a.status != http.StatusOK {
		t.Fatalf("retry of the last accepted message past its lease on a full bucket: %+v, want 200 (a duplicate)", a)
	}
	// A snapshot's record is never marked: its story proves it published.
	if a := r.post(t, "brand", token, snapshot(uuid.NewString())); a.status != http.StatusInsufficientStorage {
		t.Fatalf("a new snapshot on a full bucket: %+v, want 507", a)
	}
	topicMessages := func() uint64 {
		t.Helper()
		topic, err := st.JS.Stream(ctx, store.StreamName("brand"))
		if err != nil {
			t.Fatal(err)
		}
		return topic.CachedInfo().State.Msgs
	}
	if n := topicMessages(); n != uint64(len(accepted)) {
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
	// The replica reports the bucket's use and its bound, for an alert
	// before it is full: here within a record of it.
	if used, limit := sharedRecordsGauge(t, metrics, "storybus_shared_records_bytes", bucket), sharedRecordsGauge(t, metrics, "storybus_shared_records_max_bytes", bucket); limit != bound || used > limit || used < limit-600 {
		t.Fatalf("metrics of the full bucket: %v bytes used, %v bound; want the bound of %d, used within a record of it", used, bound, bound)
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
	// The bound in force is the raised one, whichever this replica asked for.
	if got := sharedRecordsGauge(t, metrics, "storybus_shared_records_max_bytes", bucket); got != 1<<20 {
		t.Fatalf("storybus_shared_records_max_bytes after the bound was raised: %v, want %d", got, 1<<20)
	}
	if a := r.post(t, "brand", token, snapshot(uuid.NewString())); a.status != http.StatusAccepted {
		t.Fatalf("a new message once the bound is raised: %+v", a)
	}
	// The takeover of the last record now succeeds, and its
	// republication is dropped as a duplicate by the topic.
	if a := r.post(t, "brand", token, storyEvent(last)); a.status != http.StatusOK {
		t.Fatalf("retry of the last message accepted at the bound, once raised: %+v, want 200 (a duplicate)", a)
	}
	if n := topicMessages(); n != uint64(len(accepted))+1 {
		t.Fatalf("the topic holds %d messages, %d were accepted", n, len(accepted)+1)
	}
}

// openPool connects a store with o and opens pool name on it, with the
// store's replicas.
func openPool(t *testing.T, o store.Options, name string) (*store.Store, *pool.Pool) {
	t.Helper()
	st, err := store.Connect(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	p, err := pool.Open(context.Background(), st.JS, name, max(o.Replicas, 1))
	if err != nil {
		t.Fatal(err)
	}
	return st, p
}

// sharedRecordsGauge reads a gauge of bucket from a replica's metrics;
// -1 when there is none.
func sharedRecordsGauge(t *testing.T, m *bus.Metrics, name, bucket string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "bucket" && l.GetValue() == bucket {
					return s.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// aheadClock is the store's clock moved ahead by a duration: a test takes
// a record past its lease without waiting for it.
type aheadClock struct{ ahead atomic.Int64 }

func (c *aheadClock) StoreNow(context.Context) (time.Time, error) {
	return time.Now().Add(time.Duration(c.ahead.Load())), nil
}

// TestRetriesAtOnceAtTheBound: an event recorded and never published (its
// attempt stopped after the record), the shared bucket then full, and
// eight retries of it at once past the lease, three times over, on a
// three-node cluster. None can take the record over, so each publishes
// under it; the replicated topic lets one through and answers the others
// at once that the same message id is in process. Every answer is 202
// (one, at most), 200 duplicate or 503 message.in_flight, never a failure
// that says the message was not published; the topic holds it once. A
// snapshot recorded and never published is refused 507, as new.
func TestRetriesAtOnceAtTheBound(t *testing.T) {
	url := storetest.StartCluster(t, storetest.NATSServer(t, "../.."), 3).URL()
	st, p := openPool(t, store.Options{URL: url, Replicas: 3, SharedBuckets: true, SharedRecordsMaxBytes: 8 << 10}, "bounded")
	ctx := context.Background()
	storeClock := &aheadClock{}
	r := startReplica(t, p, bus.Options{Store: st, StoreClock: storeClock, RequestTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}, "a")
	w := workspace("brand")
	w.Connections[0].Limits = &v1alpha1.Limits{RatePerSecond: 1000, Burst: 1000, DailyQuota: 100000}
	putInForce(t, p, w, "a")
	token, status := r.token(t, "brand")
	if status != http.StatusOK {
		t.Fatalf("token: %d", status)
	}

	// The record an attempt that stopped after recording leaves.
	id := uuid.NewString()
	kv, err := st.JS.KeyValue(ctx, store.SharedRecordsBucket(w.IdempotencyWindow.Duration))
	if err != nil {
		t.Fatal(err)
	}
	record := func(body string, after string) string {
		t.Helper()
		msg, err := som.Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		sum, err := msg.ContentHash()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Create(ctx, store.SharedKeyPrefix("brand")+store.EncodeToken(msg.MessageID), []byte(`{"h":"`+hex.EncodeToString(sum[:])+`","s":"recorded"`+after+`}`)); err != nil {
			t.Fatal(err)
		}
		return msg.MessageID
	}
	record(storyEvent(id), "")
	// A snapshot of a new story, recorded likewise and never published.
	snap := snapshot(uuid.NewString())
	record(snap, `,"e":0`)
	accepted := 0
	for refused, try := 0, 0; refused < 3; try++ {
		if try == 1000 {
			t.Fatal("the bucket of 8 KiB is not full after 1,000 messages")
		}
		if a := r.post(t, "brand", token, storyEvent(uuid.NewString())); a.status == http.StatusAccepted {
			accepted++
			refused = 0
		} else {
			refused++
		}
	}

	storeClock.ahead.Store(int64(publish.Lease))
	published := 0
	for round := range 3 {
		answers := make([]answer, 8)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() { answers[i] = r.post(t, "brand", token, storyEvent(id)) })
		}
		wg.Wait()
		for _, a := range answers {
			switch {
			case a.status == http.StatusAccepted:
				published++
			case a.status == http.StatusOK, a.status == http.StatusServiceUnavailable && a.rule == rules.MessageInFlight:
			default:
				t.Errorf("round %d: a retry answered %+v, want 202, 200 or 503 %s", round, a, rules.MessageInFlight)
			}
		}
	}
	if published > 1 {
		t.Errorf("%d retries answered 202", published)
	}
	topic, err := st.JS.Stream(ctx, store.StreamName("brand"))
	if err != nil {
		t.Fatal(err)
	}
	if n := topic.CachedInfo().State.Msgs; n != uint64(accepted)+1 {
		t.Fatalf("the topic holds %d messages; %d were accepted before, and the retried one once", n, accepted)
	}
	// The snapshot is not on its story, and its record cannot be taken
	// over: it is refused like a new message, and nothing is published.
	if a := r.post(t, "brand", token, snap); a.status != http.StatusInsufficientStorage || a.rule != rules.WorkspaceStorageFull {
		t.Fatalf("a retry past its lease of a snapshot recorded and never published, at the bound: %+v, want 507 %s", a, rules.WorkspaceStorageFull)
	}
	if topic, err = st.JS.Stream(ctx, store.StreamName("brand")); err != nil {
		t.Fatal(err)
	} else if n := topic.CachedInfo().State.Msgs; n != uint64(accepted)+1 {
		t.Fatalf("the topic holds %d messages after the snapshot's retry, want %d", n, accepted+1)
	}
}
