package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

// connect connects to url, with shared buckets or not.
func connect(t *testing.T, url string, shared bool) *store.Store {
	t.Helper()
	st, err := store.Connect(store.Options{URL: url, SharedBuckets: shared})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// streams lists the store's streams.
func streams(t *testing.T, st *store.Store) []string {
	t.Helper()
	var names []string
	lister := st.JS.StreamNames(context.Background())
	for name := range lister.Name() {
		names = append(names, name)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// TestPooledWorkspacesShareTheirBuckets: with shared buckets, a workspace
// is one stream, its topic; its records and limit counters are keys of
// buckets shared by the workspaces, one records bucket per idempotency
// window. The same key of two workspaces is two records, read from the
// replicas and from the leader alike; deleting a workspace removes its
// keys and leaves the others'; and a workspace that has a records bucket
// of its own (from a bus of its own on the cluster) keeps using it.
func TestPooledWorkspacesShareTheirBuckets(t *testing.T) {
	ctx := context.Background()
	url := storetest.Listening(t).ClientURL()
	week := 7 * 24 * time.Hour

	// A dedicated bus on the cluster first: its workspace has its own bucket.
	dedicated := connect(t, url, false)
	own, err := dedicated.OpenWorkspace(ctx, "moved", week, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := own.Records.Create(ctx, "m1", []byte("before the move")); err != nil {
		t.Fatal(err)
	}

	pool := connect(t, url, true)
	a, err := pool.OpenWorkspace(ctx, "desk-a", week, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pool.OpenWorkspace(ctx, "desk-b", week, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pool.OpenWorkspace(ctx, "desk-c", 8*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := pool.OpenWorkspace(ctx, "moved", week, 0)
	if err != nil {
		t.Fatal(err)
	}
	limiters := map[string]*limits.Limiter{}
	for _, ws := range []string{"desk-a", "desk-b"} {
		if limiters[ws], err = limits.Open(ctx, pool.JS, ws, limits.Options{Shared: true}); err != nil {
			t.Fatal(err)
		}
	}
	// A client's address remembered in one workspace is not known in the
	// other, whose keys are its own.
	if err := limiters["desk-a"].RememberAddress(ctx, "client", "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	for ws, want := range map[string]bool{"desk-a": true, "desk-b": false} {
		if known, err := limiters[ws].KnownAddress(ctx, "client", "192.0.2.1"); err != nil || known != want {
			t.Fatalf("%s knows the address: %t, %v; want %t", ws, known, err, want)
		}
	}
	want := []string{
		"KV_" + store.RecordsBucket("moved"),
		"KV_" + store.SharedLimitsBucket,
		"KV_" + store.SharedRecordsBucket(week),
		"KV_" + store.SharedRecordsBucket(8*24*time.Hour),
		store.StreamName("desk-a"), store.StreamName("desk-b"), store.StreamName("desk-c"), store.StreamName("moved"),
	}
	slices.Sort(want)
	if got := streams(t, pool); !slices.Equal(got, want) {
		t.Fatalf("streams %v, want %v", got, want)
	}
	if a.RecordsBucket != store.SharedRecordsBucket(week) || c.RecordsBucket != store.SharedRecordsBucket(8*24*time.Hour) {
		t.Fatalf("records buckets %s and %s", a.RecordsBucket, c.RecordsBucket)
	}
	// A window is counted in whole seconds, rounded up: one name, one TTL.
	odd, err := pool.OpenWorkspace(ctx, "desk-odd", week+500*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := store.SharedRecordsBucket(week + time.Second); odd.RecordsBucket != want {
		t.Fatalf("records of a window of %s in %s, want %s", week+500*time.Millisecond, odd.RecordsBucket, want)
	}
	if e, err := moved.Records.Get(ctx, "m1"); err != nil || string(e.Value()) != "before the move" {
		t.Fatalf("the moved workspace's record: %v, %v", e, err)
	}

	// One key, two workspaces: two records, each compare-and-swapped alone.
	revA, err := a.Records.Create(ctx, "k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Records.Create(ctx, "k", []byte("b")); err != nil {
		t.Fatalf("desk-b's k after desk-a's: %v", err)
	}
	if _, err := a.Records.Create(ctx, "k", []byte("again")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("desk-a's k created twice: %v", err)
	}
	for ws, value := range map[*store.Workspace]string{a: "a", b: "b"} {
		e, err := ws.Records.Get(ctx, "k")
		if err != nil || string(e.Value()) != value || e.Key() != "k" {
			t.Fatalf("%s's k: %v, %v", ws.ID, e, err)
		}
		e, err = ws.RecordsLeader.Get(ctx, "k")
		if err != nil || string(e.Value()) != value {
			t.Fatalf("%s's k from the leader: %v, %v", ws.ID, e, err)
		}
	}
	if _, err := b.RecordsLeader.GetRevision(ctx, "k", revA); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("desk-a's revision read as desk-b's: %v", err)
	}
	if _, err := a.Records.Keys(ctx); err == nil {
		t.Fatal("a workspace listed the keys of a shared bucket")
	}

	deleted, err := store.DeleteWorkspace(ctx, pool.JS, "desk-a")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(deleted, "stream "+store.StreamName("desk-a")) || !slices.Contains(deleted, "keys of bucket "+store.SharedRecordsBucket(week)) {
		t.Fatalf("deleted %v", deleted)
	}
	if _, err := a.Records.Get(ctx, "k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("desk-a's record after its deletion: %v", err)
	}
	if e, err := b.Records.Get(ctx, "k"); err != nil || string(e.Value()) != "b" {
		t.Fatalf("desk-b's record after desk-a's deletion: %v, %v", e, err)
	}
}
