//go:build scale

package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/internal/testutil"
)

// restSettle is how long the cluster is left after the last workspace
// opened before its CPU is read, and restWindow how long it is read.
const (
	restSettle = 10 * time.Second
	restWindow = 20 * time.Second
)

// TestClusterAtRest measures what idle pooled workspaces cost a
// three-node NATS cluster (make scale-cluster): each is one topic stream
// of three replicas, a raft group whose leader nats-server keeps sending
// heartbeats to its followers however idle it is. For each size of
// STORYBUS_REST_WORKSPACES (comma-separated; none, 100, 300 and 1,000 by
// default) a fresh cluster has that many workspaces opened on shared
// buckets with three replicas, as a pool's are (one raft group each; the
// window and limits a Tenant sets do not change that), is left to settle,
// and has its servers' CPU read over restWindow.
func TestClusterAtRest(t *testing.T) {
	sizes := []int{0, 100, 300, 1000}
	if v := os.Getenv("STORYBUS_REST_WORKSPACES"); v != "" {
		sizes = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				t.Fatalf("STORYBUS_REST_WORKSPACES=%q: want sizes such as 0,100,300,1000", v)
			}
			sizes = append(sizes, n)
		}
	}
	bin := storetest.NATSServer(t, "../..")
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			cluster := storetest.StartCluster(t, bin, 3)
			st, err := store.Connect(store.Options{URL: cluster.URL(), Replicas: 3, SharedBuckets: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			ctx := context.Background()
			opened := time.Now()
			openAll(t, st, n)
			t.Logf("%d workspaces opened in %s", n, time.Since(opened).Round(time.Millisecond))

			time.Sleep(restSettle)
			before := clusterCPU(t, cluster)
			time.Sleep(restWindow)
			used := clusterCPU(t, cluster) - before
			cores := used.Seconds() / restWindow.Seconds()
			perThousand := ""
			if n > 0 {
				perThousand = fmt.Sprintf(" (%.2f per 1,000 workspaces)", cores*1000/float64(n))
			}
			t.Logf("%d workspaces at rest: the three servers used %.2f s of CPU over %s, %.2f cores%s",
				n, used.Seconds(), restWindow, cores, perThousand)

			// Every workspace is still there to be served: the heartbeats
			// measured are those of live groups.
			info, err := st.JS.AccountInfo(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.Streams < n {
				t.Fatalf("the account holds %d streams, want at least the %d topics", info.Streams, n)
			}
		})
	}
}

// openAll opens workspaces ws0000, ws0001 … of st, n in all, eight at
// once.
func openAll(t *testing.T, st *store.Store, n int) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, n)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := st.OpenWorkspace(ctx, fmt.Sprintf("ws%04d", i), 7*24*time.Hour, 0)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("workspace %d: %w", i, err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// clusterCPU is the CPU the cluster's servers have used so far.
func clusterCPU(t *testing.T, c *storetest.Cluster) time.Duration {
	t.Helper()
	var sum time.Duration
	for _, pid := range c.PIDs() {
		st, err := testutil.ProcStat(pid)
		if err != nil {
			t.Fatal(err)
		}
		sum += st.CPU
	}
	return sum
}
