package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/storybus/storybus/bus/store"
)

// TestALostConnectionEndsTheOperationsWatchingIt: a request in flight
// when the store connection is lost ends then, not at its deadline, and
// says it may have been carried out; what watches the connection after
// the client reconnected is not ended by the earlier loss.
func TestALostConnectionEndsTheOperationsWatchingIt(t *testing.T) {
	dir := t.TempDir()
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	url := ns.ClientURL()
	st, err := store.Connect(store.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	// A responder that never answers: the request waits for its
	// deadline unless something ends it.
	arrived := make(chan struct{}, 1)
	if _, err := st.Conn.Subscribe("silent", func(*nats.Msg) { arrived <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := st.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer st.Watch.OnLoss(cancel)()
	done := make(chan error, 1)
	go func() {
		_, err := st.Conn.RequestWithContext(ctx, "silent", nil)
		done <- err
	}()
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the request did not arrive in 20s")
	}
	lost := time.Now()
	ns.Shutdown()
	ns.WaitForShutdown()
	select {
	case err := <-done:
		if !store.MayHaveLanded(err) {
			t.Fatalf("the request ended with %v; want a failure that may have landed", err)
		}
		t.Logf("the request ended %v after its server stopped", time.Since(lost).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("the request was still waiting 20s after its server stopped")
	}

	// The client reconnects to the server, started again on its address.
	ns2, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: dir, Listen: strings.TrimPrefix(url, "nats://")})
	if err != nil {
		t.Fatalf("restart on %s: %v", url, err)
	}
	t.Cleanup(func() { ns2.Shutdown(); ns2.WaitForShutdown() })
	deadline := time.Now().Add(20 * time.Second)
	for !st.Conn.IsConnected() {
		if time.Now().After(deadline) {
			t.Fatal("the client did not reconnect in 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if stop := st.Watch.OnLoss(func() {}); !stop() {
		t.Fatal("watching after the reconnection: already called for the earlier loss")
	}
	// A nil watch watches nothing.
	var none *store.ConnWatch
	if none.OnLoss(func() { t.Error("called by a nil watch") })() {
		t.Fatal("a nil watch said it stopped a call")
	}
}
