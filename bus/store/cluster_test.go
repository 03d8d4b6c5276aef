package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

// TestBusesOpenOneWorkspaceAtOnce: three buses that open the same
// workspaces at the same time on a three-node cluster, as the replicas of
// a pool do when they start together, all open them. nats-server leaves
// concurrent creates of one replicated stream unanswered although it
// creates the stream; without CreateOrUpdate's second attempt each bus
// waits for the answer until its deadline and fails.
func TestBusesOpenOneWorkspaceAtOnce(t *testing.T) {
	cluster := storetest.StartCluster(t, storetest.NATSServer(t, "../.."), 3)
	var wg sync.WaitGroup
	errs := make(chan error, 9)
	for i := range 3 {
		st, err := store.Connect(store.Options{URL: cluster.URLs()[i], Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, ws := range []string{"desk-a", "desk-b", "desk-c"} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				start := time.Now()
				_, err := st.OpenWorkspace(ctx, ws, 7*24*time.Hour, 0)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("bus %d, workspace %s, after %v: %w", i, ws, time.Since(start), err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
