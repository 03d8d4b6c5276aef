package store_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// TestNewWorkspaceAnswersDirectGetsAtOnce: on a three-node cluster a
// workspace just opened answers a direct get of its topic and of its
// records bucket at once, through every server, and so does a bucket
// AwaitBucket waited for (as the limits bucket is opened): a replicated stream is
// acknowledged before its replicas listen for direct gets, and a read in
// between found no responder (the workspace's first publish answered
// 503 registry.unavailable).
func TestNewWorkspaceAnswersDirectGetsAtOnce(t *testing.T) {
	cluster := storetest.StartCluster(t, storetest.NATSServer(t, "../.."), 3)
	var stores []*store.Store
	for _, url := range cluster.URLs() {
		st, err := store.Connect(store.Options{URL: url, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		stores = append(stores, st)
	}
	ctx := context.Background()
	// Sixty workspaces, twelve opened at once, so that the servers are
	// busy creating streams while the first reads come, as a pool's
	// replicas opening the workspaces of a busy pool are.
	var noResponders atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 12)
	for i := range 60 {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ws := fmt.Sprintf("fresh-%d", i)
			w, err := stores[i%3].OpenWorkspace(ctx, ws, 7*24*time.Hour, 0)
			if err != nil {
				t.Error(err)
				return
			}
			// A bucket of its own, as the limits bucket is opened.
			kv, err := store.CreateOrUpdate(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
				return stores[i%3].JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "limits-" + ws, Replicas: 3})
			})
			if err != nil {
				t.Error(err)
				return
			}
			store.AwaitBucket(ctx, kv)
			for j := range 3 {
				if _, err := w.Stream.GetLastMsgForSubject(ctx, "som."+ws+".story.s"+strconv.Itoa(j)); errors.Is(err, nats.ErrNoResponders) {
					noResponders.Add(1)
				}
				if _, err := w.Records.Get(ctx, "k"+strconv.Itoa(j)); errors.Is(err, nats.ErrNoResponders) {
					noResponders.Add(1)
				}
				if _, err := kv.Get(ctx, "k"+strconv.Itoa(j)); errors.Is(err, nats.ErrNoResponders) {
					noResponders.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := noResponders.Load(); n > 0 {
		t.Errorf("%d direct gets of 540 on workspaces and buckets just opened found no responder", n)
	}
}
