package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/store"
)

// persistMode is the persistence of a workspace's records bucket.
func persistMode(t *testing.T, st *store.Store, workspace string) jetstream.PersistModeType {
	t.Helper()
	s, err := st.JS.Stream(context.Background(), "KV_"+store.RecordsBucket(workspace))
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config.PersistMode
}

// TestEmbeddedRecordsAreFlushedAsynchronously: on the embedded store, which
// lives and dies with the bus process, a new records bucket is flushed
// asynchronously and reports the window a crash can lose; connected by URL
// (an external server, which can fail on its own) it is durable when
// acknowledged; and a bucket keeps the persistence it was created with.
func TestEmbeddedRecordsAreFlushedAsynchronously(t *testing.T) {
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: t.TempDir(), SyncAlways: true, SyncInterval: 30 * time.Second, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	ctx := context.Background()
	embedded, err := store.Connect(store.Options{Embedded: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(embedded.Close)
	external, err := store.Connect(store.Options{URL: ns.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(external.Close)

	ws, err := embedded.OpenWorkspace(ctx, "fresh", 7*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if pm := persistMode(t, embedded, "fresh"); pm != jetstream.AsyncPersistMode {
		t.Errorf("embedded records bucket: persist mode %v; want async", pm)
	}
	if ws.RecordsLossWindow < 30*time.Second || ws.RecordsLossWindow > time.Minute {
		t.Errorf("loss window %v; want the sync interval (30s) and a margin", ws.RecordsLossWindow)
	}
	// The bucket's TTL is still the idempotency window.
	st, err := ws.Records.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 7*24*time.Hour || st.History() != 1 {
		t.Errorf("records bucket TTL %v, history %d; want 168h and 1", st.TTL(), st.History())
	}

	// The benchmark's naive baselines ask for a record fsynced like a message.
	ws, err = embedded.OpenWorkspace(ctx, "baseline", 7*24*time.Hour, 0, store.DurableRecords())
	if err != nil {
		t.Fatal(err)
	}
	if pm := persistMode(t, embedded, "baseline"); pm != jetstream.DefaultPersistMode || ws.RecordsLossWindow != 0 {
		t.Errorf("durable records asked for: persist mode %v, loss window %v; want default and 0", pm, ws.RecordsLossWindow)
	}

	ws, err = external.OpenWorkspace(ctx, "older", 7*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if pm := persistMode(t, external, "older"); pm != jetstream.DefaultPersistMode || ws.RecordsLossWindow != 0 {
		t.Errorf("records bucket over a URL: persist mode %v, loss window %v; want default and 0", pm, ws.RecordsLossWindow)
	}
	// The embedded store opening that bucket later (a bus upgraded in
	// place) keeps it as it is, and says no record can be lost.
	ws, err = embedded.OpenWorkspace(ctx, "older", 8*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if pm := persistMode(t, embedded, "older"); pm != jetstream.DefaultPersistMode || ws.RecordsLossWindow != 0 {
		t.Errorf("an existing durable bucket: persist mode %v, loss window %v; want default and 0", pm, ws.RecordsLossWindow)
	}
	if st, err := ws.Records.Status(ctx); err != nil || st.TTL() != 8*24*time.Hour {
		t.Errorf("the existing bucket's TTL was not updated: %v", err)
	}
}

// TestCleanStop: the mark of a clean stop is taken once, and a store
// started cleanly reports that no record can have been lost.
func TestCleanStop(t *testing.T) {
	dir := t.TempDir()
	if clean, err := store.TakeCleanStop(dir); err != nil || clean {
		t.Fatalf("a new directory: clean %v, %v; want false", clean, err)
	}
	if err := store.MarkCleanStop(dir); err != nil {
		t.Fatal(err)
	}
	if clean, err := store.TakeCleanStop(dir); err != nil || !clean {
		t.Fatalf("after a clean stop: clean %v, %v; want true", clean, err)
	}
	if clean, err := store.TakeCleanStop(dir); err != nil || clean {
		t.Fatalf("the mark was taken twice: clean %v, %v", clean, err)
	}

	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: dir, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if got := ns.JetStreamConfig().SyncInterval; got != store.RecordsSyncInterval {
		t.Errorf("sync interval under always %v; want %v", got, store.RecordsSyncInterval)
	}
	st, err := store.Connect(store.Options{Embedded: ns, CleanStart: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ws, err := st.OpenWorkspace(context.Background(), "newsroom", 7*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if pm := persistMode(t, st, "newsroom"); pm != jetstream.AsyncPersistMode || ws.RecordsLossWindow != 0 {
		t.Errorf("clean start: persist mode %v, loss window %v; want async and 0", pm, ws.RecordsLossWindow)
	}
}

// TestDataDirIsLocked: one process at a time serves a data directory.
func TestDataDirIsLocked(t *testing.T) {
	dir := t.TempDir()
	first, err := store.LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := store.LockDataDir(dir); err == nil {
		second.Close()
		t.Fatal("a second lock of the data directory was granted")
	}
	first.Close()
	again, err := store.LockDataDir(dir)
	if err != nil {
		t.Fatalf("the lock was not released with its file: %v", err)
	}
	again.Close()
}

// TestRecordsBucketsKeepTheShortestDuplicateWindow: a records bucket has
// the shortest duplicate window, which a starting nats-server reads back
// (no record carries a Nats-Msg-Id for it to drop), and one created with
// nats.go's 2 minutes by an earlier bus is given it when opened.
func TestRecordsBucketsKeepTheShortestDuplicateWindow(t *testing.T) {
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	ctx := context.Background()
	st, err := store.Connect(store.Options{Embedded: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: store.RecordsBucket("older"), History: 1, TTL: 7 * 24 * time.Hour, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for _, ws := range []string{"fresh", "older"} {
		if _, err := st.OpenWorkspace(ctx, ws, 7*24*time.Hour, 0); err != nil {
			t.Fatal(err)
		}
		s, err := st.JS.Stream(ctx, "KV_"+store.RecordsBucket(ws))
		if err != nil {
			t.Fatal(err)
		}
		if d := s.CachedInfo().Config.Duplicates; d != store.RecordsDuplicateWindow {
			t.Errorf("records bucket of %s: duplicate window %v; want %v", ws, d, store.RecordsDuplicateWindow)
		}
	}
}
