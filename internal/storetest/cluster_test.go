package storetest

import (
	"net"
	"testing"
	"time"
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
			held, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			picks := 0
			pickAddr = func(t testing.TB) string {
				picks++
				if picks == taken {
					return held.Addr().String()
				}
				return freeAddr(t)
			}
			defer func() { pickAddr = freeAddr }()

			start := time.Now()
			c := StartCluster(t, NATSServer(t, "../.."), 3)
			if picks < 12 {
				t.Fatalf("the ports were picked %d times: the cluster was not started again", picks)
			}
			for _, u := range c.URLs() {
				if u == "nats://"+held.Addr().String() {
					t.Fatalf("a node serves on the taken port %s", u)
				}
			}
			t.Logf("started again and served after %s", time.Since(start).Round(time.Millisecond))
		})
	}
}
