package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/internal/testutil"
)

// TestStartClusterPicksOtherPortsWhenOneIsTaken: a port another process
// holds by the time a node binds it makes that node exit; the local
// cluster is then started again on other ports, and no node serves on the
// taken one. The first node's port and the second's are tried: the first
// node waits for its peers, so a peer's exit must be seen while it waits.
func TestStartClusterPicksOtherPortsWhenOneIsTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server processes")
	}
	for name, taken := range map[string]int{"the first node's": 1, "the second node's": 4} {
		t.Run(name, func(t *testing.T) {
			addrs := testutil.NewTakenAddr(t, taken, freeAddr)
			pickAddr = addrs.Pick
			defer func() { pickAddr = freeAddr }()

			o := DefaultOptions()
			o.Cluster = 3
			o.NATSServer = storetest.NATSServer(t, "..")
			o.DataDir = t.TempDir()
			start := time.Now()
			c, err := startCluster(t.Context(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.stop)
			// The exit is seen at once, not once the wait for a ready
			// cluster has run out.
			if took := time.Since(start); took > clusterReadyWithin/2 {
				t.Fatalf("started again only after %s", took)
			}
			if addrs.Picks < 18 {
				t.Fatalf("the ports were picked %d times: the cluster was not started again", addrs.Picks)
			}
			if strings.Contains(c.url(), addrs.Held) {
				t.Fatalf("a node serves on the taken port: %s", c.url())
			}
			t.Logf("started again and ready after %s", time.Since(start).Round(time.Millisecond))
		})
	}
}
