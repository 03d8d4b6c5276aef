package cli

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/internal/testutil"
)

// singleCopyWarning is what warnSingleCopy's record says.
const singleCopyWarning = "keep one copy (--replicas 1)"

// TestServeWarnsOfSingleCopyStreamsOnACluster: a pool replica run on a
// three-node cluster without --replicas warns that its streams and
// buckets keep one copy; with --replicas 3 it does not, and neither does
// one on a NATS server that is no cluster.
func TestServeWarnsOfSingleCopyStreamsOnACluster(t *testing.T) {
	cluster := storetest.StartCluster(t, storetest.NATSServer(t, "../../.."), 3)
	if logs := serveUntilReady(t, ServeOptions{NATSURL: cluster.URL(), Replicas: 1, Pool: "single", PoolReplica: "r-0"}); !strings.Contains(logs, singleCopyWarning) {
		t.Errorf("no warning of single-copy streams on a cluster; logs:\n%s", logs)
	}
	if logs := serveUntilReady(t, ServeOptions{NATSURL: cluster.URL(), Replicas: 3, Pool: "triple", PoolReplica: "r-0"}); strings.Contains(logs, singleCopyWarning) {
		t.Errorf("warned of single-copy streams with --replicas 3; logs:\n%s", logs)
	}

	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: t.TempDir(), Listen: testutil.FreeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if logs := serveUntilReady(t, ServeOptions{NATSURL: ns.ClientURL(), Replicas: 1, Pool: "alone", PoolReplica: "r-0"}); strings.Contains(logs, singleCopyWarning) {
		t.Errorf("warned of single-copy streams on a server that is no cluster; logs:\n%s", logs)
	}
}

// serveUntilReady runs Serve with o (on free loopback ports) until it
// listens, stops it, and returns what it logged.
func serveUntilReady(t *testing.T, o ServeOptions) string {
	t.Helper()
	o.Listen, o.OpsListen = "127.0.0.1:0", "127.0.0.1:0"
	logs := &testutil.SyncBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, o, nil, slog.New(slog.NewTextHandler(logs, nil)), func(net.Addr, net.Addr) { ready <- struct{}{} })
	}()
	select {
	case <-ready:
	case err := <-done:
		stop()
		t.Fatalf("Serve ended before serving: %v\n%s", err, logs.String())
	case <-time.After(2 * time.Minute):
		stop()
		<-done
		t.Fatalf("Serve did not listen within 2 minutes:\n%s", logs.String())
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	return logs.String()
}
