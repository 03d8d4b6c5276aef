package pool_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

// TestASharedWorkspaceKeepsItsWindow: a pool replica's workspace keeps its
// records in the shared bucket of its idempotency window, so a document
// that changes the window in place is refused, the workspace served as
// before, where writing on into another bucket would let two replicas
// both accept one message_id.
func TestASharedWorkspaceKeepsItsWindow(t *testing.T) {
	st, err := store.Connect(store.Options{URL: storetest.Listening(t).ClientURL(), SharedBuckets: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	srv := bus.New(bus.Options{Store: st, RequestTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	w := workspace("brand")
	if err := srv.Apply(ctx, w); err != nil {
		t.Fatal(err)
	}
	w = workspace("brand")
	w.IdempotencyWindow.Duration = 14 * 24 * time.Hour
	err = srv.Apply(ctx, w)
	if err == nil || !strings.Contains(err.Error(), "idempotencyWindow cannot change in place") {
		t.Fatalf("a changed window: %v, want it refused", err)
	}
	w = workspace("brand")
	w.Topic.MaxMessages = 10
	if err := srv.Apply(ctx, w); err != nil {
		t.Fatalf("a change that keeps the window: %v", err)
	}
}
