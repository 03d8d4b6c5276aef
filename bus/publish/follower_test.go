package publish_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/internal/testutil"
	"github.com/storybus/storybus/rules"
)

// TestOnAClusterWithFollowers runs, on one three-node cluster of
// nats-server processes, what only a cluster shows: a replica answering a
// direct get behind its leader, and a server lost while a producer
// publishes. Server n2 fsyncs every write and the others do not, so that
// n2, as a replica on a slow disk does, applies writes behind its leaders.
func TestOnAClusterWithFollowers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	c := storetest.StartCluster(t, storetest.NATSServer(t, "../.."), 3, storetest.SyncAlways(2))
	t.Run("a stale read is not contention", func(t *testing.T) { testStaleReadIsNotContention(t, c) })
	for _, l := range []loss{{leader: true}, {freeze: true}} {
		t.Run(l.String(), func(t *testing.T) { testLostServer(t, c, l) })
	}
}

// clusterBus is one bus process's publish core on the cluster, connected to
// one server.
type clusterBus struct {
	server string
	st     *store.Store
	ws     *store.Workspace
	core   *publish.Core
	// leaderReads counts the core's reads from a leader.
	leaderReads atomic.Int64
}

// newClusterBus connects a bus to the cluster's server n<i> and opens the
// workspace. Its publishes are told acked; wrap, when set, wraps its topic
// stream; opTimeout is its core's (0: the core's default).
func newClusterBus(t *testing.T, c *storetest.Cluster, i int, workspace string, acked *ackedHeads, wrap func(jetstream.Stream) jetstream.Stream, opTimeout time.Duration) *clusterBus {
	t.Helper()
	st, err := store.Connect(store.Options{URL: c.URLs()[i], Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ws, err := st.OpenWorkspace(context.Background(), workspace, 7*24*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		ws.Stream = wrap(ws.Stream)
	}
	b := &clusterBus{server: fmt.Sprintf("n%d", i), st: st, ws: ws}
	b.core = publish.New(ws, st.JS, publish.Options{
		Publisher: ackedSeq{st.JS, acked}, OpTimeout: opTimeout,
		Observe: func(op string, _ time.Duration) {
			if op == "leader_read" {
				b.leaderReads.Add(1)
			}
		},
	})
	return b
}

// streamLeader waits until the stream has a leader and every replica is
// current, and returns the leader's name.
func streamLeader(t *testing.T, js jetstream.JetStream, name string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := js.Stream(ctx, name)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = s.Info(ctx)
		}
		cancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == 2 &&
			!slices.ContainsFunc(info.Cluster.Replicas, func(p *jetstream.PeerInfo) bool { return !p.Current }) {
			return info.Cluster.Leader
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s: no leader with current replicas in 30s (%v)", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// openOnCluster creates the workspace's streams at three replicas, once
// the cluster has its three servers (one may just be back from a stop).
func openOnCluster(t *testing.T, st *store.Store, workspace string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := st.OpenWorkspace(ctx, workspace, 7*24*time.Hour, 0)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace %s on the cluster: %v", workspace, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// leadBy makes server lead the stream, once it has a leader and its
// replicas are current.
func leadBy(t *testing.T, st *store.Store, stream, server string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for streamLeader(t, st.JS, stream) != server {
		if time.Now().After(deadline) {
			t.Fatalf("stream %s not led by %s in 30s", stream, server)
		}
		// The leader steps down in favour of server; an answer that
		// refuses (an election under way) is tried again.
		_, _ = st.Conn.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(`{"placement":{"preferred":"`+server+`"}}`), 5*time.Second)
		time.Sleep(100 * time.Millisecond)
	}
}

// reachLeaders waits until the bus's server routes a publish to the
// leaders of the workspace's topic and records. A leader just moved
// subscribes to its stream's subjects anew, and until the other servers
// know it a publish through them finds no responder and is answered 503,
// as it should be; the test wants every snapshot accepted, so it starts
// once they know. The probe expects a last sequence the stream is not
// at: the leader answers it, and stores nothing.
func reachLeaders(t *testing.T, b *clusterBus) {
	t.Helper()
	for _, subject := range []string{"som." + b.ws.ID + ".reach", b.ws.RecordsSubjects + "reach"} {
		testutil.Eventually(t, b.server+" reaches the leader of "+subject, 30*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := b.st.JS.PublishMsg(ctx, nats.NewMsg(subject), jetstream.WithExpectLastSequence(math.MaxInt64))
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) {
				return nil // the leader answered, and refused
			}
			if err == nil {
				t.Fatalf("the probe of %s was stored", subject)
			}
			return err
		})
	}
}

// ackedHeads remembers, per story subject, the stream sequence of the
// latest publish acknowledged.
type ackedHeads struct{ latest sync.Map }

func (h *ackedHeads) get(subject string) uint64 {
	if v, ok := h.latest.Load(subject); ok {
		return v.(*atomic.Uint64).Load()
	}
	return 0
}

func (h *ackedHeads) set(subject string, seq uint64) {
	v, _ := h.latest.LoadOrStore(subject, &atomic.Uint64{})
	for latest := v.(*atomic.Uint64); ; {
		old := latest.Load()
		if old >= seq || latest.CompareAndSwap(old, seq) {
			return
		}
	}
}

// ackedSeq is a publisher that tells acked each acknowledged publish.
type ackedSeq struct {
	next  publish.Publisher
	acked *ackedHeads
}

func (p ackedSeq) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := p.next.PublishMsg(ctx, m, opts...)
	if err == nil {
		p.acked.set(m.Subject, ack.Sequence)
	}
	return ack, err
}

// staleReads is a topic stream that counts the story heads it reads
// behind the latest one acknowledged.
type staleReads struct {
	jetstream.Stream
	acked *ackedHeads
	stale atomic.Int64
}

func (s *staleReads) GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := s.Stream.GetLastMsgForSubject(ctx, subject)
	if latest := s.acked.get(subject); (err == nil && m.Sequence < latest) || (store.IsMissing(err) && latest > 0) {
		s.stale.Add(1)
	}
	return m, err
}

// testStaleReadIsNotContention: two buses on the cluster, one connected to
// the server that leads the workspace's topic, the other to n2, which
// leads neither the topic nor the records bucket and applies their writes
// behind the others; n2 answers its share of every direct get, as the
// servers pick a replica at random. Producers, each the only writer of its
// stories, send each story's snapshots to the two buses in turn, each once
// the one before was answered, as behind a round-robin front. A bus then
// often decides over a head, or reads back its own record just written,
// from a replica that does not hold it yet, and the compare-and-swap it
// made on that read fails with no other writer. Every snapshot is
// accepted, in order and without a sequence warning; none is answered
// commit.contention (before the bus confirmed a failed compare-and-swap
// with the leader, 13 runs of 14 had one).
func testStaleReadIsNotContention(t *testing.T, c *storetest.Cluster) {
	const workspace, producers, snapshots, storyLength = "stale", 8, 3000, 10
	boot, err := store.Connect(store.Options{URL: c.URL(), Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer boot.Close()
	openOnCluster(t, boot, workspace)
	// n2 fsyncs every write: it leads neither stream.
	topic, records := store.StreamName(workspace), "KV_"+store.RecordsBucket(workspace)
	leadBy(t, boot, topic, "n0")
	leadBy(t, boot, records, "n1")

	acked := &ackedHeads{}
	a := newClusterBus(t, c, 0, workspace, acked, nil, 10*time.Second)
	var heads *staleReads
	b := newClusterBus(t, c, 2, workspace, acked, func(s jetstream.Stream) jetstream.Stream {
		heads = &staleReads{Stream: s, acked: acked}
		return heads
	}, 10*time.Second)
	buses := []*clusterBus{a, b}
	for _, bus := range buses {
		reachLeaders(t, bus)
	}

	var sent atomic.Int64
	errs := make(chan error, producers)
	for p := range producers {
		go func() {
			for n := 0; sent.Add(1) <= snapshots; n++ {
				// Stories of storyLength snapshots: a story's first
				// snapshots are those a bus decides over a head it has
				// not cached, read from its replica.
				story, seq := fmt.Sprintf("story-%d-%d", p, n/storyLength), int64(n%storyLength+1)
				bus := buses[(n+p)%2]
				out := bus.core.Publish(context.Background(), input(t, snap{story: story, seq: seq}.json()))
				if statusOf(out) != http.StatusAccepted {
					errs <- fmt.Errorf("%s, snapshot %d, on the bus on %s: %d %+v", story, seq, bus.server, statusOf(out), out.Refusal)
					return
				}
				if ids := ruleIDs(out); slices.Contains(ids, rules.SequenceGap) {
					errs <- fmt.Errorf("%s, snapshot %d: tolerated %v over a stale head", story, seq, ids)
					return
				}
			}
			errs <- nil
		}()
	}
	for range producers {
		if err := <-errs; err != nil {
			sent.Store(snapshots) // the other producers stop
			t.Error(err)
		}
	}
	a.core.Wait()
	b.core.Wait()
	t.Logf("%d snapshots; the bus on n2 read %d heads behind the leader; leader reads: %d and %d", min(sent.Load(), snapshots), heads.stale.Load(), a.leaderReads.Load(), b.leaderReads.Load())
	if t.Failed() {
		return
	}
	if a.leaderReads.Load()+b.leaderReads.Load() == 0 {
		t.Fatal("no refused compare-and-swap was confirmed with a leader")
	}
	// The topic holds each story's snapshots once each, in order.
	info, err := a.ws.Stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != snapshots {
		t.Fatalf("the topic holds %d messages, want %d", info.State.Msgs, snapshots)
	}
	last := map[string]int64{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := a.ws.StreamLeader.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(m.Header.Get(publish.HeaderSequence), 10, 64)
		if n != last[m.Subject]+1 {
			t.Fatalf("stream sequence %d: sequence_number %d after %d", seq, n, last[m.Subject])
		}
		last[m.Subject] = n
	}
}

// A loss is a server lost while a producer publishes: which server, and
// how.
type loss struct {
	// leader: the bus's server, the one lost, leads the workspace's topic
	// and records; else it leads neither.
	leader bool
	// freeze stops the server (SIGSTOP) instead of killing it (SIGKILL):
	// a hung server, or one whose host or network is lost, which closes
	// no socket.
	freeze bool
}

func (l loss) String() string {
	s := "the bus's server, a follower,"
	if l.leader {
		s = "the bus's server, leading the topic and records,"
	}
	if l.freeze {
		return s + " frozen"
	}
	return s + " killed"
}

// testLostServer: a producer publishes one story's snapshots, one at a
// time, through a bus connected to one server, and that server is lost
// while it does, between two publishes. The producer retries as producers
// do, after each answer's Retry-After; the longest time between two 2xx
// answers is printed. Only a generous bound is asserted: the cluster's own
// re-election of a lost leader is in it.
func testLostServer(t *testing.T, c *storetest.Cluster, l loss) {
	workspace := fmt.Sprintf("lost%d", time.Now().UnixNano()%1e6)
	boot, err := store.Connect(store.Options{URL: c.URL(), Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer boot.Close()
	openOnCluster(t, boot, workspace)
	topic, records := store.StreamName(workspace), "KV_"+store.RecordsBucket(workspace)
	const target = 1 // the bus's server, lost
	leader := "n0"
	if l.leader {
		leader = "n1"
	}
	leadBy(t, boot, topic, leader)
	leadBy(t, boot, records, leader)
	bus := newClusterBus(t, c, target, workspace, &ackedHeads{}, nil, 0) // the bus's own timeouts

	type answer struct {
		at     time.Time
		status int
		rule   string
	}
	var answers []answer
	var lost time.Time
	lastOK, longest := time.Now(), time.Duration(0)
	var longestFrom time.Time
	okAfter := 0
	deadline := time.Now().Add(45 * time.Second)
	for seq := int64(1); okAfter < 20 && time.Now().Before(deadline); seq++ {
		body := snap{story: "story-lost", seq: seq}.json()
		for time.Now().Before(deadline) {
			if lost.IsZero() && seq == 50 {
				// Between two publishes: a publish whose record was
				// written, its answer lost with the server, would be
				// answered message.in_flight for the rest of its 30 s
				// lease, as the contract says.
				lost = time.Now()
				if l.freeze {
					c.Freeze(target)
				} else {
					c.Stop(target, syscall.SIGKILL)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the bus's request timeout
			out := bus.core.Publish(ctx, input(t, body))
			cancel()
			now, status := time.Now(), statusOf(out)
			a := answer{at: now, status: status}
			if out.Refusal != nil {
				a.rule = out.Refusal.Rule
			}
			answers = append(answers, a)
			if status/100 == 2 {
				if gap := now.Sub(lastOK); gap > longest {
					longest, longestFrom = gap, lastOK
				}
				lastOK = now
				if !lost.IsZero() {
					okAfter++
				}
				break
			}
			if status != http.StatusServiceUnavailable {
				t.Fatalf("snapshot %d: %d %+v", seq, status, out.Refusal)
			}
			time.Sleep(max(out.RetryAfter, 100*time.Millisecond))
		}
	}
	if gap := time.Since(lastOK); okAfter < 20 && gap > longest {
		longest, longestFrom = gap, lastOK
	}
	if l.freeze {
		c.Thaw(target)
	} else {
		c.Start(target)
	}
	t.Logf("%s: the longest time between 2xx answers was %v", l, longest.Round(time.Millisecond))
	for _, a := range answers {
		if !a.at.Before(longestFrom) && !a.at.After(longestFrom.Add(longest)) {
			t.Logf("  %+8.3fs %d %s", a.at.Sub(lost).Seconds(), a.status, a.rule)
		}
	}
	if okAfter < 20 {
		t.Fatalf("20 snapshots were not accepted within 45s of losing %s", bus.server)
	}
	if longest >= 30*time.Second {
		t.Fatalf("publishing stalled %v", longest)
	}
}
