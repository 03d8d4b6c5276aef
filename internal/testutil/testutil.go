// Package testutil holds the small helpers the tests of several packages
// share: a free loopback address, polling for a condition with a deadline
// instead of sleeping, a busy file beside watched ones, and what
// /proc/<pid>/stat says of a process.
package testutil

import (
	"errors"
	"fmt"
	"net"
	"os"
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

// KeepWriting appends a line to the file at path every interval, from now
// until the test ends (30 s at most): a busy neighbour, such as a log file,
// for the file watchers' tests.
func KeepWriting(t testing.TB, path string, every time.Duration) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; time.Duration(i)*every < 30*time.Second; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _ = fmt.Fprintf(f, "line %d\n", i)
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		f.Close()
	})
}

// RaceBuildFlags are the go build flags of a program that a test runs as a
// process of its own: -race when the test itself runs under the race
// detector, so the program does too. Run it with RaceEnv, and its first
// data race ends it (exit status 66) with the report on its standard error.
func RaceBuildFlags() []string {
	if RaceDetector {
		return []string{"-race"}
	}
	return nil
}

// RaceEnv is the environment of a program built with RaceBuildFlags: the
// test's own, with the race detector told to stop the program at its first
// report rather than let it run on.
func RaceEnv() []string {
	return append(os.Environ(), "GORACE=halt_on_error=1")
}
