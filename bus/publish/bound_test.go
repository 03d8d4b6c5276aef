package publish_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/rules"
)

// TestARenameRefusedAtTheBound: a snapshot decided over a cached head
// that another bus has moved on since records itself naming that head;
// the topic then refuses its publication, the leader's head shows it only
// behind, and its record is rewritten to name the head it now follows. A
// shared records bucket that filled up in between refuses that rewrite
// (on one server, a key may replace itself at the bound only with a
// message no larger, headers included: an update keeps the revision it
// expected in a header where the create kept "0", and here the record
// also names a head with a digit more). The snapshot
// is refused 507 workspace.storage_full, nothing is published for it,
// and its record is removed, so that a retry is checked as new.
func TestARenameRefusedAtTheBound(t *testing.T) {
	ns := storetest.Listening(t)
	ctx := context.Background()
	faults := &faultSet{}
	core := func(f publish.Faults) (*publish.Core, *store.Workspace, *store.Store) {
		t.Helper()
		st, err := store.Connect(store.Options{URL: ns.ClientURL(), SharedBuckets: true, SharedRecordsMaxBytes: 8 << 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		ws, err := st.OpenWorkspace(ctx, "brand", 7*24*time.Hour, 0)
		if err != nil {
			t.Fatal(err)
		}
		return publish.New(ws, st.JS, publish.Options{Faults: f, OpTimeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)}), ws, st
	}
	a, ws, st := core(faults.hook)
	b, _, _ := core(nil)
	t.Cleanup(func() { a.Wait(); b.Wait() })

	// a caches the story's head at the topic's first message.
	want(t, a.Publish(ctx, input(t, snap{story: "harbour", seq: 1}.json())), http.StatusAccepted, "")
	// b moves it on, past the topic's ninth message.
	for range 9 {
		want(t, b.Publish(ctx, input(t, event(uuid.NewString(), "other"))), http.StatusAccepted, "")
	}
	want(t, b.Publish(ctx, input(t, snap{story: "harbour", seq: 2}.json())), http.StatusAccepted, "")

	topicMsgs := func() uint64 {
		t.Helper()
		s, err := st.JS.Stream(ctx, store.StreamName("brand"))
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.Msgs
	}
	// Once a's record is written, b fills the bucket.
	third := snap{id: uuid.NewString(), story: "harbour", seq: 3}
	filled := false
	faults.set(publish.FaultAfterRecord, func(id string) error {
		if id != third.id {
			return nil
		}
		for refused, try := 0, 0; refused < 3; try++ {
			if try == 1000 {
				t.Error("the bucket of 8 KiB is not full after 1,000 messages")
				return nil
			}
			if statusOf(b.Publish(ctx, input(t, event(uuid.NewString(), "other")))) == http.StatusAccepted {
				refused = 0
			} else {
				refused++
			}
		}
		filled = true
		return nil
	})
	before := uint64(0)
	faults.set(publish.FaultBeforePublish, func(id string) error {
		if id == third.id && before == 0 {
			before = topicMsgs()
		}
		return nil
	})
	want(t, a.Publish(ctx, input(t, third.json())), http.StatusInsufficientStorage, rules.WorkspaceStorageFull)
	if !filled {
		t.Fatal("the bucket was not filled while the snapshot was recorded")
	}
	if n := topicMsgs(); n != before {
		t.Fatalf("the topic holds %d messages, %d before the refused snapshot's publication", n, before)
	}
	if _, err := ws.Records.Get(ctx, store.EncodeToken(third.id)); !store.IsMissing(err) {
		t.Fatalf("the refused snapshot's record: %v, want it removed", err)
	}
}
