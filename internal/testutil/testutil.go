// Package testutil holds the small helpers the tests of several packages
// share: a free loopback address, and polling for a condition with a
// deadline instead of sleeping.
package testutil

import (
	"errors"
	"net"
	"testing"
	"time"
)

// pollEvery is how often Eventually checks its condition.
const pollEvery = 20 * time.Millisecond

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Eventually calls f until it returns nil, failing the test with what and
// f's last error when within passes first.
func Eventually(t testing.TB, what string, within time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %s: %v", what, within, err)
		}
		time.Sleep(pollEvery)
	}
}

// errNotYet is the error of a condition that does not hold yet.
var errNotYet = errors.New("not yet")

// EventuallyTrue is Eventually for a condition without an error to tell.
func EventuallyTrue(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	Eventually(t, what, within, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}
