package publish_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/store"
)

// writer is one bus's core on the env's store, counting what it sends.
type writer struct {
	core        *publish.Core
	pub         *countingPublisher
	leaderReads atomic.Int64
}

func newWriter(t *testing.T, e *env) *writer {
	t.Helper()
	st, err := store.Connect(store.Options{Embedded: e.ns, URL: e.url, Replicas: e.replicas})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ws, err := st.OpenWorkspace(context.Background(), e.ws.ID, 7*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{pub: &countingPublisher{js: st.JS}}
	w.core = publish.New(ws, st.JS, publish.Options{Publisher: w.pub, OpTimeout: 10 * time.Second,
		Observe: func(op string, _ time.Duration) {
			if op == "leader_read" {
				w.leaderReads.Add(1)
			}
		}})
	return w
}

// TestCachedHeadsBehindAreReadFromTheLeaderFirst: two buses writing one
// story's snapshots in turn, as a pool's replicas behind a front that
// balances each request, each find their cached head behind the other's
// write. After a few snapshots a bus reads the head from the leader before
// it decides, instead of a publish the topic refuses and the reads and
// rewrite that follow: one publish per snapshot again. Once one bus writes
// the story alone, it trusts its cache again and reads nothing.
func TestCachedHeadsBehindAreReadFromTheLeaderFirst(t *testing.T) {
	e := newEnv(t)
	a, b := newWriter(t, e), newWriter(t, e)
	seq := int64(0)
	send := func(w *writer) {
		t.Helper()
		seq++
		want(t, w.core.Publish(context.Background(), input(t, snap{story: "harbour", seq: seq}.json())), http.StatusAccepted, "")
	}
	publishes := func() int64 { return a.pub.calls.Load() + b.pub.calls.Load() }
	leaderReads := func() int64 { return a.leaderReads.Load() + b.leaderReads.Load() }

	// In turn: the first snapshots pay for a head behind.
	for i := range 20 {
		send([]*writer{a, b}[i%2])
	}
	beforeP, beforeL := publishes(), leaderReads()
	for i := range 40 {
		send([]*writer{a, b}[i%2])
	}
	if refused := publishes() - beforeP - 40; refused > 4 {
		t.Errorf("%d publishes refused over a head behind in 40 snapshots written in turn; want the head read from the leader first", refused)
	}
	if reads := leaderReads() - beforeL; reads < 36 {
		t.Errorf("%d leader reads for 40 snapshots written in turn; want about one each", reads)
	}

	// One bus alone: its cache is right again, and soon trusted.
	for range 30 {
		send(a)
	}
	beforeP, beforeL = publishes(), leaderReads()
	for range 20 {
		send(a)
	}
	if p, l := publishes()-beforeP, leaderReads()-beforeL; p != 20 || l != 0 {
		t.Errorf("one bus alone: %d publishes and %d leader reads for 20 snapshots; want 20 and none", p, l)
	}
}
