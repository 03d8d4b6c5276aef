package storetest

import (
	"net"
	"testing"
)

// TestStartClusterPicksOtherPortsWhenOneIsTaken gives the first node a
// client port another process holds, as one that was free when it was
// picked and taken before the node bound it: the cluster starts on other
// ports, and every node serves.
func TestStartClusterPicksOtherPortsWhenOneIsTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	picks := 0
	pickAddr = func(t testing.TB) string {
		picks++
		if picks == 1 {
			return held.Addr().String()
		}
		return freeAddr(t)
	}
	defer func() { pickAddr = freeAddr }()

	c := StartCluster(t, NATSServer(t, "../.."), 3)
	if picks < 12 {
		t.Fatalf("the ports were picked %d times: the cluster was not started again", picks)
	}
	if got := c.URLs()[0]; got == "nats://"+held.Addr().String() {
		t.Fatalf("the node serves on the taken port %s", got)
	}
}
