package storetest

import (
	"testing"
	"time"

	"github.com/storybus/storybus/internal/testutil"
)

// TestStartClusterPicksOtherPortsWhenOneIsTaken gives a node a client
// port another process holds, as one that was free when it was picked and
// taken before the node bound it: the cluster starts on other ports, and
// every node serves. The first node's and the second's are tried: the
// first waits for its peers, so a peer's lost port must be seen while the
// first is polled.
func TestStartClusterPicksOtherPortsWhenOneIsTaken(t *testing.T) {
	for name, taken := range map[string]int{"the first node's": 1, "the second node's": 4} {
		t.Run(name, func(t *testing.T) {
			addrs := testutil.NewTakenAddr(t, taken, func() (string, error) { return freeAddr(t), nil })
			pickAddr = func(testing.TB) string {
				addr, _ := addrs.Pick()
				return addr
			}
			defer func() { pickAddr = freeAddr }()

			start := time.Now()
			c := StartCluster(t, NATSServer(t, "../.."), 3)
			if addrs.Picks < 12 {
				t.Fatalf("the ports were picked %d times: the cluster was not started again", addrs.Picks)
			}
			for _, u := range c.URLs() {
				if u == "nats://"+addrs.Held {
					t.Fatalf("a node serves on the taken port %s", u)
				}
			}
			t.Logf("started again and served after %s", time.Since(start).Round(time.Millisecond))
		})
	}
}
