package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

// TestRemovedRecordLeavesNoMarker: a records bucket allows message TTLs,
// also one a bus before them made (its stream is updated when the
// workspace is opened), and a removed record leaves a marker that expires
// after store.RemovedRecordTTL, not one that stays for the window: the
// bucket holds nothing for it then, and the key can be created again. A
// removal guarded by a revision that is not the record's is
// refused and removes nothing.
func TestRemovedRecordLeavesNoMarker(t *testing.T) {
	_, st := storetest.Embedded(t)
	ctx := context.Background()
	window := 7 * 24 * time.Hour
	if _, err := st.OpenWorkspace(ctx, "newsroom", window, 0); err != nil {
		t.Fatal(err)
	}
	records := "KV_" + store.RecordsBucket("newsroom")
	stream := func() *jetstream.StreamInfo {
		t.Helper()
		s, err := st.JS.Stream(ctx, records)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo()
	}
	// The bucket as a bus before message TTLs made it.
	old := stream().Config
	if !old.AllowMsgTTL {
		t.Fatal("a new records bucket does not allow message TTLs")
	}
	if err := st.JS.DeleteStream(ctx, records); err != nil {
		t.Fatal(err)
	}
	old.AllowMsgTTL = false
	if _, err := st.JS.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	ws, err := st.OpenWorkspace(ctx, "newsroom", window, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !stream().Config.AllowMsgTTL {
		t.Fatal("opening the workspace left its older records bucket without message TTLs")
	}

	recordAndRemove(t, ws)
	for deadline := time.Now().Add(20 * time.Second); stream().State.Msgs != 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the bucket holds %d messages 20 s after its only record was removed: the marker stays", stream().State.Msgs)
		}
	}
	if _, err := ws.Records.Create(ctx, "message-1", []byte(`{"h":"x","s":"recorded"}`)); err != nil {
		t.Fatalf("a key removed cannot be created again: %v", err)
	}
}

// TestRemovalOnAnOlderServer: a server before 2.11 does not allow message
// TTLs, so the store does not ask for them, and a removal there is a
// delete guarded by the record's revision: its marker stays in the bucket
// (for the window), a read finds no record, and the key can be created
// again.
func TestRemovalOnAnOlderServer(t *testing.T) {
	for version, want := range map[string]bool{
		"2.10.22": false, "2.9.0": false, "1.4.1": false, "": false, "unknown": false,
		"2.11.0": true, "2.12.3": true, "2.12.0-RC.1": true, "3.0.0": true,
	} {
		if got := store.AllowsMessageTTLs(version); got != want {
			t.Errorf("nats-server %q allows message TTLs: %v, want %v", version, got, want)
		}
	}

	_, st := storetest.Embedded(t)
	ctx := context.Background()
	ws, err := st.OpenWorkspace(ctx, "newsroom", 7*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	ws.WithoutExpiringRemovals()
	recordAndRemove(t, ws)
	history, err := ws.Records.History(ctx, "message-1")
	if err != nil {
		t.Fatalf("the removal's marker: %v", err)
	}
	if last := history[len(history)-1]; last.Operation() != jetstream.KeyValueDelete {
		t.Fatalf("the removal's marker is a %v, want a delete: a purge with a TTL the bucket does not allow is refused", last.Operation())
	}
	if _, err := ws.Records.Create(ctx, "message-1", []byte(`{"h":"x","s":"recorded"}`)); err != nil {
		t.Fatalf("a key removed cannot be created again: %v", err)
	}
}

// recordAndRemove writes the record "message-1" in ws, checks that a
// removal guarded by another revision is refused and leaves it, then
// removes it, guarded by its revision, and checks that it reads as gone.
func recordAndRemove(t *testing.T, ws *store.Workspace) {
	t.Helper()
	ctx := context.Background()
	rev, err := ws.Records.Create(ctx, "message-1", []byte(`{"h":"x","s":"recorded"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.RemoveRecord(ctx, "message-1", rev+1); err == nil {
		t.Fatal("a removal guarded by another revision succeeded")
	}
	if _, err := ws.Records.Get(ctx, "message-1"); err != nil {
		t.Fatalf("the record after a refused removal: %v", err)
	}
	if err := ws.RemoveRecord(ctx, "message-1", rev); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Records.Get(ctx, "message-1"); !store.IsMissing(err) {
		t.Fatalf("a removed record is read: %v", err)
	}
}
