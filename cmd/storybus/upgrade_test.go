package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/client"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/internal/testutil"
)

// The upgrade prober (docs/durability.md): a bus pool of three replica
// processes on a three-node NATS cluster, behind an L4 round-robin front,
// while producers publish snapshots and events for many stories of
// several workspaces. A NATS node is killed with SIGKILL, then a replica,
// another NATS node is stopped with SIGTERM, each started again, and the
// replicas are rolled one at a time with SIGTERM. Then every topic is read
// back: nothing answered 2xx is missing, nothing is published twice, no
// story's snapshots are out of order, every message had its final 2xx,
// producers met only retryable answers, and while replicas were rolled no
// workspace went a second without a successful answer.

// proberPlan is how long and how hard the prober runs.
type proberPlan struct {
	workspaces, producers, storiesEach int
	// every is how often each story publishes its next message.
	every time.Duration
	// cycles of: SIGKILL a NATS node, SIGKILL a replica, SIGTERM another
	// NATS node, roll the three replicas with SIGTERM.
	cycles int
	// drain is the replicas' --drain-period.
	drain time.Duration
	// settle is how long producers publish, once every workspace
	// publishes again after a disruption, before the next.
	settle time.Duration
}

// The short form runs in make test; STORYBUS_UPGRADE=long runs the long
// one (make test-upgrade).
var (
	shortPlan = proberPlan{workspaces: 3, producers: 6, storiesEach: 8, every: 250 * time.Millisecond, cycles: 1, drain: 2 * time.Second, settle: time.Second}
	longPlan  = proberPlan{workspaces: 4, producers: 8, storiesEach: 25, every: 500 * time.Millisecond, cycles: 3, drain: 5 * time.Second, settle: 5 * time.Second}
)

const (
	proberPool   = "prober"
	proberSecret = "prober-secret-0123456789abcdef0123456789"
	// maxRollGap is the longest a workspace's producers may go without a
	// successful answer while a replica is rolled with SIGTERM.
	maxRollGap = time.Second
	// maxDisruptionGap bounds, generously, the same while a replica is
	// killed or a NATS node lost or restarted, when the cluster elects new
	// leaders for what the node led: the figure is measured and recorded
	// (docs/pools.md), not asserted.
	maxDisruptionGap = 30 * time.Second
)

// TestUpgradeProber runs the upgrade prober: its short form, or its long
// one with STORYBUS_UPGRADE=long.
func TestUpgradeProber(t *testing.T) {
	plan := shortPlan
	if os.Getenv("STORYBUS_UPGRADE") == "long" {
		plan = longPlan
	}
	p := newProber(t, plan)
	p.run()
	checked := time.Now()
	p.check()
	t.Logf("topics read and checked in %v", time.Since(checked).Round(100*time.Millisecond))
}

// prober is one run: the cluster, the replicas, the front and what the
// producers saw.
type prober struct {
	t        *testing.T
	plan     proberPlan
	cluster  *storetest.Cluster
	st       *store.Store
	ids      []string // workspace ids
	replicas []*replicaProc
	front    *front

	stop chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	sent      []*sentMessage
	successes []success
	retries   []retried
	failures  []error
	phases    []phase
	// began, stopped and finished: the producers' start, the stop, and
	// when the last of them had its final answer.
	began, stopped, finished time.Time
	setup                    time.Duration
}

// replicaProc is one `storybus serve --pool` process, or the succession
// of processes that take its name and addresses.
type replicaProc struct {
	name   string
	member *member
	cmd    *exec.Cmd
	done   chan struct{}
	logs   *testutil.SyncBuffer
	starts int
}

// sentMessage is one message a producer handed to its client, and its
// final answer.
type sentMessage struct {
	id, workspace, story string
	snapshot             bool
	seq                  int
	status               int // 202 or 200 once answered so
	err                  error
}

// success is when a message of a workspace got its 2xx.
type success struct {
	at        time.Time
	workspace string
}

// retried is one failed attempt the client sent again.
type retried struct {
	at         time.Time
	status     int
	rule       string
	retryAfter time.Duration
	noAnswer   bool
	// workspace and text say where and what, for a failure's report.
	workspace, text string
}

// phase is one disruption, from its start to the next one's (the last
// one's to the producers' stop, a settle period after it).
type phase struct {
	name       string
	kind       phaseKind
	start, end time.Time
}

// phaseKind is what a phase disrupts, and how.
type phaseKind int

const (
	// replicaKill: a replica is killed with SIGKILL and replaced.
	replicaKill phaseKind = iota
	// replicaRoll: a replica is stopped with SIGTERM and replaced, as a
	// rolling update does.
	replicaRoll
	// nodeRestart: a NATS node is stopped with SIGTERM and started again.
	nodeRestart
	// nodeLoss: a NATS node is killed with SIGKILL and started again.
	nodeLoss
)

func newProber(t *testing.T, plan proberPlan) *prober {
	p := &prober{t: t, plan: plan, stop: make(chan struct{})}
	start := time.Now()
	defer func() { p.setup = time.Since(start) }()
	p.cluster = storetest.StartCluster(t, storetest.NATSServer(t, "../.."), 3)
	st, err := store.Connect(store.Options{URL: p.cluster.URL(), Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	p.st = st
	ctx := context.Background()
	pl, err := pool.Open(ctx, st.JS, proberPool, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range plan.workspaces {
		w := &config.Workspace{
			ID:         fmt.Sprintf("desk-%d", i),
			SigningKey: fmt.Sprintf("desk-%d-signing-key-0123456789abcdef0123", i),
			Connections: []config.Connection{{Name: "cms", SecretHash: config.HashSecret(proberSecret), Grant: config.Grant{
				Publish: config.PublishGrant{SystemIDs: []string{"cms"}, MessageTypes: []string{"*"}}}}},
		}
		w.Default()
		// The buckets were just created: their first writes wait for
		// the cluster to elect their leaders.
		testutil.Eventually(t, "workspace "+w.ID+" put into the pool", time.Minute, func() error {
			_, err := pl.Put(ctx, w)
			return err
		})
		p.ids = append(p.ids, w.ID)
	}
	var members []*member
	for i := range 3 {
		r := &replicaProc{name: fmt.Sprintf("replica-%d", i), logs: &testutil.SyncBuffer{},
			member: &member{api: testutil.FreeAddr(t), ops: testutil.FreeAddr(t)}}
		p.replicas = append(p.replicas, r)
		members = append(members, r.member)
	}
	t.Cleanup(func() {
		for _, r := range p.replicas {
			if r.cmd != nil {
				_ = r.cmd.Process.Kill()
				<-r.done
			}
			if t.Failed() {
				t.Logf("%s's last logs:\n%s", r.name, tail(r.logs.String(), 8000))
			}
			if dir := os.Getenv("STORYBUS_PROBER_LOGS"); dir != "" {
				_ = os.WriteFile(dir+"/"+r.name+".log", []byte(r.logs.String()), 0o644)
			}
		}
	})
	for _, r := range p.replicas {
		p.start(r)
	}
	for _, r := range p.replicas {
		p.waitReady(r)
	}
	f, err := newFront(members)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	p.front = f
	testutil.EventuallyTrue(t, "the front sees the three replicas ready", 30*time.Second, func() bool { return f.Ready() == 3 })
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// start starts a process for replica r on its addresses.
func (p *prober) start(r *replicaProc) {
	p.t.Helper()
	cmd := exec.Command(binary, "serve", "--nats-url", p.cluster.URL(), "--replicas", "3",
		"--pool", proberPool, "--pool-replica", r.name,
		"--listen", r.member.api, "--ops-listen", r.member.ops,
		"--drain-period", p.plan.drain.String())
	cmd.Stdout, cmd.Stderr = r.logs, r.logs
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	r.starts++
	fmt.Fprintf(r.logs, "--- start %d of %s\n", r.starts, r.name)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done
}

// waitReady waits until r's /readyz answers 200.
func (p *prober) waitReady(r *replicaProc) {
	p.t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	testutil.Eventually(p.t, r.name+" ready", 2*time.Minute, func() error {
		select {
		case <-r.done:
			p.t.Fatalf("%s exited before it was ready:\n%s", r.name, tail(r.logs.String(), 8000))
		default:
		}
		res, err := hc.Get("http://" + r.member.ops + "/readyz")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d", res.StatusCode)
		}
		return nil
	})
}

// stopReplica signals r and waits for it to exit.
func (p *prober) stopReplica(r *replicaProc, sig syscall.Signal) {
	p.t.Helper()
	_ = r.cmd.Process.Signal(sig)
	// The drain period, then at most 15 s to complete what is in
	// progress; generously more on a loaded machine.
	select {
	case <-r.done:
	case <-time.After(p.plan.drain + time.Minute):
		p.t.Fatalf("%s did not exit after %v", r.name, sig)
	}
	if sig == syscall.SIGTERM && r.cmd.ProcessState.ExitCode() != 0 {
		p.t.Fatalf("%s exited with %v after SIGTERM:\n%s", r.name, r.cmd.ProcessState, tail(r.logs.String(), 8000))
	}
	r.cmd = nil
}

// run publishes while it loses and restarts NATS nodes, kills a replica
// and rolls the replicas.
func (p *prober) run() {
	t := p.t
	p.began = time.Now()
	for i := range p.plan.producers {
		c := p.newClient(p.ids[i%len(p.ids)])
		p.wg.Add(1)
		go p.produce(c, p.ids[i%len(p.ids)], i)
	}
	p.settle()
	for cycle := range p.plan.cycles {
		// The kills first: a message one caught between its record and
		// its publication waits out its 30 s lease (503 message.in_flight)
		// while the rest of the cycle runs. The loss of a NATS node
		// catches the most.
		node := p.streamLeader(p.ids[cycle%len(p.ids)])
		p.phase(fmt.Sprintf("cycle %d: SIGKILL NATS node n%d", cycle, node), nodeLoss, func() {
			p.cluster.Stop(node, syscall.SIGKILL)
			p.cluster.Start(node)
		})
		victim := p.replicas[cycle%len(p.replicas)]
		p.phase(fmt.Sprintf("cycle %d: SIGKILL %s", cycle, victim.name), replicaKill, func() {
			p.stopReplica(victim, syscall.SIGKILL)
			p.start(victim)
			p.waitReady(victim)
		})
		node = p.streamLeader(p.ids[(cycle+1)%len(p.ids)])
		p.phase(fmt.Sprintf("cycle %d: SIGTERM NATS node n%d", cycle, node), nodeRestart, func() {
			p.cluster.Stop(node, syscall.SIGTERM)
			p.cluster.Start(node)
		})
		for _, r := range p.replicas {
			p.phase(fmt.Sprintf("cycle %d: SIGTERM %s", cycle, r.name), replicaRoll, func() {
				p.stopReplica(r, syscall.SIGTERM)
				p.start(r)
				p.waitReady(r)
			})
		}
	}
	// The last disruption's aftermath is measured too.
	p.settle()
	p.stopped = time.Now()
	p.mu.Lock()
	p.phases[len(p.phases)-1].end = p.stopped
	p.mu.Unlock()
	close(p.stop)
	finished := make(chan struct{})
	go func() { p.wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(5 * time.Minute):
		t.Fatal("producers did not finish within 5 minutes of the stop")
	}
	p.finished = time.Now()
}

// settle lets the producers publish undisturbed for a while.
func (p *prober) settle() {
	select {
	case <-time.After(p.plan.settle):
	case <-p.stop:
	}
}

// phase runs one disruption, and the settle period after it, as a named
// window of the run.
func (p *prober) phase(name string, kind phaseKind, disrupt func()) {
	now := time.Now()
	p.mu.Lock()
	if n := len(p.phases); n > 0 {
		p.phases[n-1].end = now
	}
	p.phases = append(p.phases, phase{name: name, kind: kind, start: now})
	p.mu.Unlock()
	disrupt()
	p.recovered(time.Now())
	p.settle()
}

// recovered waits until every workspace has had a success since t: the
// disruption's aftermath belongs to its phase, not the next.
func (p *prober) recovered(t time.Time) {
	p.t.Helper()
	testutil.Eventually(p.t, "every workspace publishing again", 2*time.Minute, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		since := map[string]bool{}
		for i := len(p.successes) - 1; i >= 0 && p.successes[i].at.After(t); i-- {
			since[p.successes[i].workspace] = true
		}
		for _, id := range p.ids {
			if !since[id] {
				return fmt.Errorf("no success in %s since %s", id, t.Format("15:04:05.000"))
			}
		}
		return nil
	})
}

// streamLeader is the index of the NATS node leading workspace id's topic:
// the node whose loss makes the cluster elect a new leader for it.
func (p *prober) streamLeader(id string) int {
	p.t.Helper()
	var leader string
	testutil.Eventually(p.t, "the topic's leader", 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := p.st.JS.Stream(ctx, store.StreamName(id))
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return errors.New("no leader")
		}
		leader = info.Cluster.Leader
		return nil
	})
	var n int
	if _, err := fmt.Sscanf(leader, "n%d", &n); err != nil {
		p.t.Fatalf("leader %q: %v", leader, err)
	}
	return n
}

func (p *prober) newClient(workspace string) *client.Client {
	p.t.Helper()
	// Each producer has connections of its own through the front.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	// The documented discipline with the waits capped at 4 s rather than
	// 30 s, and more attempts to cover the 30 s a message recorded but
	// not published waits: a message a kill caught is published soon
	// after its lease ends, not up to 30 s later.
	retry := client.RetryPolicy{Max: 4 * time.Second, Attempts: 20}
	if err := retry.Validate(); err != nil {
		p.t.Fatal(err)
	}
	c, err := client.New(client.Options{
		URL: p.front.URL(), Workspace: workspace, HTTPClient: hc, Retry: retry,
		Tokens: &client.ClientCredentials{URL: p.front.URL(), Workspace: workspace, ClientID: "cms", ClientSecret: proberSecret, HTTPClient: hc},
		OnRetry: func(e *client.Error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.retries = append(p.retries, retried{at: time.Now(), status: e.Status, rule: e.Rule, retryAfter: e.RetryAfter,
				noAnswer: e.Status == 0 && errors.Is(e, client.ErrNoAnswer), workspace: workspace, text: e.Error()})
		},
	})
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// produce publishes, until the stop, for each of the producer's
// stories in turn a snapshot (the story's next sequence number) and an
// event, one message every plan.every per story, each only once the one
// before has its final answer: a story whose message is being retried
// waits, the others carry on, as the client's Send does for one system.
func (p *prober) produce(c *client.Client, workspace string, n int) {
	defer p.wg.Done()
	var stories sync.WaitGroup
	for k := range p.plan.storiesEach {
		stories.Add(1)
		go func() {
			defer stories.Done()
			story := fmt.Sprintf("producer-%d-story-%d", n, k)
			// The stories' ticks are spread over the interval, and over
			// the producers.
			spread := p.plan.every * time.Duration(k*p.plan.producers+n) / time.Duration(p.plan.storiesEach*p.plan.producers)
			select {
			case <-time.After(spread):
			case <-p.stop:
				return
			}
			tick := time.NewTicker(p.plan.every)
			defer tick.Stop()
			for seq := 1; ; seq++ {
				for _, snapshot := range []bool{true, false} {
					select {
					case <-p.stop:
						return
					case <-tick.C:
					}
					p.publish(c, workspace, story, snapshot, seq)
				}
			}
		}()
	}
	stories.Wait()
}

func (p *prober) publish(c *client.Client, workspace, story string, snapshot bool, seq int) {
	now := time.Now().UTC().Truncate(time.Second)
	e := client.Envelope{MessageType: "story.context", SystemID: "cms", Timestamp: now,
		Payload: map[string]any{"story_id": story, "sequence_number": seq, "state": "draft", "headline": fmt.Sprintf("Harbour bridge, take %d", seq)}}
	if !snapshot {
		e.MessageType = "story.event"
		e.Payload = map[string]any{"story_id": story, "event": "updated", "occurred_at": now.Format(time.RFC3339)}
	}
	m, err := client.Build(e)
	if err != nil {
		p.t.Error(err)
		return
	}
	s := &sentMessage{id: m.ID(), workspace: workspace, story: story, snapshot: snapshot, seq: seq}
	// No deadline of the prober's own: the client's retries are the
	// bound, and a message that exhausts them is a failure.
	res, err := c.Publish(context.Background(), m)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = append(p.sent, s)
	if err != nil {
		s.err = err
		p.failures = append(p.failures, fmt.Errorf("%s %s seq %d, at %s: %w", workspace, story, seq, time.Now().Format("15:04:05.000"), err))
		return
	}
	s.status = res.Status
	p.successes = append(p.successes, success{at: time.Now(), workspace: workspace})
}

// topicMessage is one message read back from a topic.
type topicMessage struct {
	id, story string
	snapshot  bool
	seq       int
}

// readTopic reads workspace id's topic whole, in stream order, trying
// again while the cluster recovers from the last disruption.
func (p *prober) readTopic(id string) []topicMessage {
	p.t.Helper()
	var out []topicMessage
	testutil.Eventually(p.t, "topic "+id+" read whole", 2*time.Minute, func() (err error) {
		out, err = p.tryReadTopic(id)
		return err
	})
	return out
}

func (p *prober) tryReadTopic(id string) ([]topicMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := p.st.JS.Stream(ctx, store.StreamName(id))
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var out []topicMessage
	for uint64(len(out)) < info.State.Msgs {
		batch, err := cons.Fetch(min(500, int(info.State.Msgs)-len(out)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var body struct {
				MessageID   string `json:"message_id"`
				MessageType string `json:"message_type"`
				Payload     struct {
					StoryID        string `json:"story_id"`
					SequenceNumber int    `json:"sequence_number"`
				} `json:"payload"`
			}
			if err := json.Unmarshal(m.Data(), &body); err != nil {
				p.t.Fatalf("topic %s: a message that is not SOM JSON: %v", id, err)
			}
			if h := m.Headers().Get(nats.MsgIdHdr); h != body.MessageID {
				p.t.Fatalf("topic %s: Nats-Msg-Id %q on message %q", id, h, body.MessageID)
			}
			out = append(out, topicMessage{id: body.MessageID, story: body.Payload.StoryID,
				snapshot: body.MessageType == "story.context", seq: body.Payload.SequenceNumber})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if got == 0 {
			return nil, fmt.Errorf("read %d of its %d messages, then nothing", len(out), info.State.Msgs)
		}
	}
	return out, nil
}

// check reads every topic back and asserts the prober's promises.
func (p *prober) check() {
	t := p.t
	p.mu.Lock()
	defer p.mu.Unlock()

	// Every message has its final 2xx: the client's retries outlast
	// every disruption.
	for _, err := range p.failures {
		t.Errorf("a message without a final success: %v", err)
	}

	// Exactly once in its topic, by message id; snapshots in order.
	answered := map[string]*sentMessage{}
	for _, s := range p.sent {
		answered[s.id] = s
	}
	inTopic, duplicates, unknown, outOfOrder := 0, 0, 0, 0
	seen := map[string]int{}
	for _, id := range p.ids {
		last := map[string]int{}
		for _, m := range p.readTopic(id) {
			inTopic++
			seen[m.id]++
			if seen[m.id] == 2 {
				duplicates++
				t.Errorf("message %s is in topic %s more than once", m.id, id)
			}
			s, ok := answered[m.id]
			if !ok || s.workspace != id {
				unknown++
				t.Errorf("topic %s holds message %s, which no producer sent to it", id, m.id)
			}
			if m.snapshot {
				if m.seq <= last[m.story] {
					outOfOrder++
					t.Errorf("topic %s: story %s's snapshot %d after %d", id, m.story, m.seq, last[m.story])
				}
				last[m.story] = m.seq
			}
		}
	}
	lost := 0
	for _, s := range p.sent {
		if s.status/100 == 2 && seen[s.id] == 0 {
			lost++
			t.Errorf("message %s (%s %s seq %d) was answered %d but is not in the topic", s.id, s.workspace, s.story, s.seq, s.status)
		}
	}

	// Only retryable answers: 503 or 429 with Retry-After, or none.
	counts := map[string]int{}
	for _, r := range p.retries {
		key := fmt.Sprintf("%d %s", r.status, r.rule)
		switch {
		case r.noAnswer:
			key = "no answer (dropped connection)"
		case (r.status == http.StatusServiceUnavailable || r.status == http.StatusTooManyRequests) && r.retryAfter > 0:
		default:
			t.Errorf("a producer met %d %s (Retry-After %v): not a retryable answer", r.status, r.rule, r.retryAfter)
		}
		counts[key]++
	}

	// Gaps between successful answers, per phase.
	// A workspace's gap is the longest its producers went without a
	// success: what its users see.
	slices.SortFunc(p.successes, func(a, b success) int { return a.at.Compare(b.at) })
	byWorkspace := map[string][]time.Time{}
	for _, s := range p.successes {
		byWorkspace[s.workspace] = append(byWorkspace[s.workspace], s.at)
	}
	worst := map[phaseKind]time.Duration{}
	// details are the first retried attempts of each phase, for a failure.
	var report, details strings.Builder
	for _, ph := range p.phases {
		var gap time.Duration
		gapIn := ""
		for _, id := range p.ids {
			if g := longestGap(byWorkspace[id], ph.start, ph.end); g > gap {
				gap, gapIn = g, id
			}
		}
		fmt.Fprintf(&report, "  %-34s %5.1fs, longest gap %v (%s), retried %v\n", ph.name, ph.end.Sub(ph.start).Seconds(),
			gap.Round(time.Millisecond), gapIn, p.retriedIn(ph.start, ph.end))
		worst[ph.kind] = max(worst[ph.kind], gap)
		shown := 0
		for _, r := range p.retries {
			if !r.at.Before(ph.start) && !r.at.After(ph.end) && shown < 10 {
				shown++
				fmt.Fprintf(&details, "  %s, %s +%v: %s\n", ph.name, r.workspace, r.at.Sub(ph.start).Round(time.Millisecond), r.text)
			}
		}
	}
	fmt.Fprintf(&report, "  %-34s %5.1fs, retried %v\n", "undisturbed, before the first", p.phases[0].start.Sub(p.began).Seconds(), p.retriedIn(p.began, p.phases[0].start))
	fmt.Fprintf(&report, "  %-34s %5.1fs, retried %v\n", "after the stop, to the last answer", p.finished.Sub(p.stopped).Seconds(), p.retriedIn(p.stopped, p.finished))

	var kinds []string
	for k := range counts {
		kinds = append(kinds, fmt.Sprintf("%s: %d", k, counts[k]))
	}
	sort.Strings(kinds)
	accepted := 0
	for _, s := range p.sent {
		if s.status/100 == 2 {
			accepted++
		}
	}
	t.Logf("upgrade prober: %d workspaces, %d producers, %d stories; %d messages answered 2xx, %d in the topics; "+
		"lost %d, duplicates %d, unknown %d, snapshots out of order %d; front refused %d connections\n"+
		"retried attempts: %s\nlongest gap: replica SIGKILL %v, SIGTERM roll %v, NATS node SIGTERM %v, NATS node SIGKILL %v\n"+
		"setup %v, publishing %v\n%s",
		len(p.ids), p.plan.producers, p.plan.producers*p.plan.storiesEach, accepted, inTopic,
		lost, duplicates, unknown, outOfOrder, p.front.refused.Load(),
		strings.Join(kinds, ", "), worst[replicaKill].Round(time.Millisecond), worst[replicaRoll].Round(time.Millisecond),
		worst[nodeRestart].Round(time.Millisecond), worst[nodeLoss].Round(time.Millisecond),
		p.setup.Round(100*time.Millisecond), p.finished.Sub(p.began).Round(100*time.Millisecond), report.String())
	defer func() {
		if t.Failed() {
			t.Logf("retried attempts, by phase:\n%s", details.String())
		}
	}()
	if accepted == 0 || inTopic < accepted {
		t.Errorf("%d messages answered 2xx, %d in the topics", accepted, inTopic)
	}
	if worst[replicaRoll] > maxRollGap {
		t.Errorf("no successful answer for %v while a replica was rolled with SIGTERM, over %v", worst[replicaRoll], maxRollGap)
	}
	for _, k := range []phaseKind{replicaKill, nodeRestart, nodeLoss} {
		if worst[k] > maxDisruptionGap {
			t.Errorf("no successful answer for %v while a replica was killed or a NATS node restarted, over %v", worst[k], maxDisruptionGap)
		}
	}
}

// retriedIn counts the retried attempts between from and to, by kind.
func (p *prober) retriedIn(from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, r := range p.retries {
		if r.at.Before(from) || r.at.After(to) {
			continue
		}
		if r.noAnswer {
			out["no answer"]++
		} else {
			out[fmt.Sprintf("%d %s", r.status, r.rule)]++
		}
	}
	return out
}

// longestGap is the longest time between from and to without a success
// (sorted), the window's edges counting as bounds.
func longestGap(successes []time.Time, from, to time.Time) time.Duration {
	var gap time.Duration
	prev := from
	for _, s := range successes {
		if s.Before(from) {
			continue
		}
		if s.After(to) {
			break
		}
		gap = max(gap, s.Sub(prev))
		prev = s
	}
	return max(gap, to.Sub(prev))
}
