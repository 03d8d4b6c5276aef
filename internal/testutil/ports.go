package testutil

import (
	"net"
	"testing"
)

// TakenAddr hands out loopback addresses for a test of a start that must
// survive a port taken by another process between its pick and its bind.
type TakenAddr struct {
	// Held is the address a listener of the test holds until it ends.
	Held string
	// Picks counts the addresses handed out.
	Picks int
	taken int
	free  func() (string, error)
}

// NewTakenAddr returns a TakenAddr whose taken-th pick (from 1) is Held
// and whose others are free's.
func NewTakenAddr(t testing.TB, taken int, free func() (string, error)) *TakenAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return &TakenAddr{Held: ln.Addr().String(), taken: taken, free: free}
}

// Pick hands out the next address.
func (a *TakenAddr) Pick() (string, error) {
	a.Picks++
	if a.Picks == a.taken {
		return a.Held, nil
	}
	return a.free()
}
