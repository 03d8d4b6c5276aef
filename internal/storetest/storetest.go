// Package storetest starts the store for tests: a real embedded
// JetStream in the test's temporary directory, and a connection to it,
// both closed when the test ends; or a cluster of separately started
// nats-server processes on loopback whose nodes a test can stop and
// start again.
package storetest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/storybus/storybus/bus/store"
)

// Embedded starts an embedded JetStream for t and connects to it.
func Embedded(t testing.TB) (*server.Server, *store.Store) {
	t.Helper()
	return EmbeddedIn(t, t.TempDir())
}

// EmbeddedIn starts an embedded JetStream on dataDir (a stopped bus's,
// for one) for t and connects to it.
func EmbeddedIn(t testing.TB, dataDir string) (*server.Server, *store.Store) {
	t.Helper()
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	st, err := store.Connect(store.Options{Embedded: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return ns, st
}

// Listening starts an embedded JetStream that also takes clients on a
// loopback port, for t: a store connected to its ClientURL is connected as
// to an external cluster (the way a pool's replicas are).
func Listening(t testing.TB) *server.Server {
	t.Helper()
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}
