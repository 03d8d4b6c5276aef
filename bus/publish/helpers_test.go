package publish_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// fakeClock is the wall clock plus an offset that tests advance, or a
// frozen instant.
type fakeClock struct {
	offset atomic.Int64
	frozen atomic.Int64 // UnixNano; 0 when not frozen
}

func (c *fakeClock) Now() time.Time {
	if f := c.frozen.Load(); f != 0 {
		return time.Unix(0, f)
	}
	return time.Now().Add(time.Duration(c.offset.Load()))
}

func (c *fakeClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// Freeze stops the clock at t: records written before t-Lease are past
// their lease, records written later are not.
func (c *fakeClock) Freeze(t time.Time) { c.frozen.Store(t.UnixNano()) }

// StoreNow is the store's time: the embedded server runs on this
// process's wall clock, which the offset moves on.
func (c *fakeClock) StoreNow(context.Context) (time.Time, error) { return c.Now(), nil }

var _ publish.StoreClock = (*fakeClock)(nil)

// countingPublisher counts topic publish calls that the store acknowledged
// as new messages.
type countingPublisher struct {
	js    jetstream.JetStream
	calls atomic.Int64
	acked atomic.Int64
	// swaps counts the calls that carried the story head's
	// compare-and-swap.
	swaps atomic.Int64
	// around, when set, publishes in place of js (a test's interception).
	around func(ctx context.Context, m *nats.Msg, publish func() (*jetstream.PubAck, error)) (*jetstream.PubAck, error)
}

func (p *countingPublisher) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	p.calls.Add(1)
	if m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) != "" {
		p.swaps.Add(1)
	}
	publish := func() (*jetstream.PubAck, error) { return p.js.PublishMsg(ctx, m, opts...) }
	var ack *jetstream.PubAck
	var err error
	if p.around != nil {
		ack, err = p.around(ctx, m, publish)
	} else {
		ack, err = publish()
	}
	if err == nil && !ack.Duplicate {
		p.acked.Add(1)
	}
	return ack, err
}

var _ publish.Publisher = (*countingPublisher)(nil)

// faultSet is a programmable fault hook: per point, a function called with
// the message id.
type faultSet struct {
	mu sync.Mutex
	at map[publish.FaultPoint]func(id string) error
}

func (f *faultSet) set(p publish.FaultPoint, fn func(id string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[publish.FaultPoint]func(string) error{}
	}
	f.at[p] = fn
}

func (f *faultSet) clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = nil
}

func (f *faultSet) hook(_ context.Context, p publish.FaultPoint, id string) error {
	f.mu.Lock()
	fn := f.at[p]
	f.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(id)
}

// env is one workspace's publish core on a real embedded JetStream.
type env struct {
	t      *testing.T
	ns     *server.Server
	st     *store.Store
	ws     *store.Workspace
	clock  *fakeClock
	faults *faultSet
	pub    *countingPublisher
	core   *publish.Core
	// url and replicas are set on an external cluster.
	url      string
	replicas int
	// sole makes the core a sole writer (publish.Options.SoleWriter).
	sole bool
}

// soleCores, while set, makes newEnv build sole-writer cores.
var soleCores bool

// externalCluster, while set, makes newEnv use an external NATS cluster.
type externalCluster struct {
	url      string
	replicas int
	next     atomic.Int64
}

var external *externalCluster

func newEnv(t *testing.T) *env {
	t.Helper()
	if external != nil {
		e := &env{t: t, clock: &fakeClock{}, faults: &faultSet{}, url: external.url, replicas: external.replicas}
		e.connect(fmt.Sprintf("ws%d", external.next.Add(1)), 7*24*time.Hour)
		return e
	}
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	e := &env{t: t, ns: ns, clock: &fakeClock{}, faults: &faultSet{}, sole: soleCores}
	e.connect("newsroom", 7*24*time.Hour)
	return e
}

// connect (re)connects and builds a fresh core: a restarted bus process.
func (e *env) connect(workspace string, window time.Duration) {
	e.t.Helper()
	st, err := store.Connect(store.Options{Embedded: e.ns, URL: e.url, Replicas: e.replicas})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(st.Close)
	ws, err := st.OpenWorkspace(context.Background(), workspace, window, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	e.st, e.ws = st, ws
	e.pub = &countingPublisher{js: st.JS}
	e.core = publish.New(ws, st.JS, publish.Options{
		StoreClock: e.clock, Faults: e.faults.hook, Publisher: e.pub, OpTimeout: 10 * time.Second,
		SoleWriter: e.sole,
	})
}

// restart simulates a new bus process on the same store.
func (e *env) restart() {
	e.core.Wait()
	e.connect(e.ws.ID, 7*24*time.Hour)
}

type snap struct {
	id, story, state, system, timestamp, embargo string
	seq                                          int64
}

func (s snap) json() []byte {
	if s.id == "" {
		s.id = uuid.NewString()
	}
	if s.state == "" {
		s.state = "draft"
	}
	if s.system == "" {
		s.system = "cms"
	}
	if s.timestamp == "" {
		s.timestamp = "2026-11-29T09:00:00Z"
	}
	payload := map[string]any{"story_id": s.story, "sequence_number": s.seq, "state": s.state, "headline": "Harbour bridge approved"}
	if s.state == "killed" {
		payload["kill_reason"] = "legal"
	}
	if s.embargo != "" {
		payload["embargo_until"] = s.embargo
	}
	b, _ := json.Marshal(map[string]any{
		"som_version": "1.0", "message_id": s.id, "message_type": "story.context", "system_id": s.system,
		"timestamp": s.timestamp, "payload": payload,
	})
	return b
}

func event(id, story string) []byte {
	return []byte(fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.event","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":%q,"event":"published","occurred_at":"2026-11-29T09:00:00Z"}}`, id, story))
}

// input parses and validates a body as stages 7 and 8 would.
func input(t *testing.T, body []byte) publish.Input {
	t.Helper()
	m, err := som.Parse(body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	refusals, warnings := som.Validate(m)
	if len(refusals) > 0 {
		t.Fatalf("invalid test message: %v", refusals)
	}
	h, err := m.ContentHash()
	if err != nil {
		t.Fatal(err)
	}
	return publish.Input{Msg: m, Hash: h, Warnings: warnings}
}

func (e *env) publish(body []byte) publish.Outcome {
	e.t.Helper()
	return e.core.Publish(context.Background(), input(e.t, body))
}

// statusOf is the HTTP status the bus answers an outcome with: 202
// accepted, 200 duplicate, or the refusal's rule's in the catalogue (the
// core's tests run no workspace rules, whose status the workspace
// declares).
func statusOf(o publish.Outcome) int {
	switch {
	case o.Abandoned:
		return 0
	case o.Refusal != nil:
		return rules.Status(o.Refusal.Rule)
	case o.Duplicate:
		return http.StatusOK
	}
	return http.StatusAccepted
}

// want checks an outcome's status and, for a refusal, its rule.
func want(t *testing.T, got publish.Outcome, status int, rule string) {
	t.Helper()
	gotRule := ""
	if got.Refusal != nil {
		gotRule = got.Refusal.Rule
	}
	if statusOf(got) != status || gotRule != rule {
		t.Fatalf("got %d %q (%+v), want %d %q", statusOf(got), gotRule, got, status, rule)
	}
}

func ruleIDs(o publish.Outcome) []string {
	var ids []string
	for _, v := range o.Tolerated {
		ids = append(ids, v.Rule)
	}
	return ids
}

// topic calls visit with each of the topic's messages, in order.
func (e *env) topic(visit func(*jetstream.RawStreamMsg)) {
	e.t.Helper()
	ctx := context.Background()
	info, err := e.ws.Stream.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := e.ws.Stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		visit(m)
	}
}

// streamCount counts the topic's messages with the message id.
func (e *env) streamCount(messageID string) int {
	e.t.Helper()
	n := 0
	e.topic(func(m *jetstream.RawStreamMsg) {
		if m.Header.Get(nats.MsgIdHdr) == messageID {
			n++
		}
	})
	return n
}

// recordExists reports whether the message id has a live record.
func (e *env) recordExists(messageID string) bool {
	_, err := e.ws.Records.Get(context.Background(), store.EncodeToken(messageID))
	return err == nil
}

func stopAt(p publish.FaultPoint, id string) func(string) error {
	return func(got string) error {
		if got == id {
			return publish.ErrStop
		}
		return nil
	}
}

func failAt(id string) func(string) error {
	return func(got string) error {
		if got == id {
			return fmt.Errorf("injected failure")
		}
		return nil
	}
}
