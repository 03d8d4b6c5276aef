package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/client"
	"github.com/storybus/storybus/internal/openapitest"
	"github.com/storybus/storybus/internal/testutil"
)

const (
	workspaceID  = "newsroom"
	cmsSecret    = "cms-secret-0123456789abcdef0123456789"
	readerSecret = "reader-secret-0123456789abcdef0123456789"
)

// busClock is the bus's lease and token clock: the wall clock plus an
// offset that the client's fake sleeps advance.
type busClock struct{ offset atomic.Int64 }

func (c *busClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *busClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// StoreNow makes the clock the store's too, so that advancing it crosses
// the publish core's 30 s lease: the embedded server runs on this
// process's wall clock.
func (c *busClock) StoreNow(context.Context) (time.Time, error) { return c.Now(), nil }

// fakeClock is the client's clock: Sleep returns at once, records the wait
// and moves time (and the bus's clock, when set) forward.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
	bus    *busClock
}

var (
	_ client.Clock       = (*fakeClock)(nil)
	_ client.TokenSource = (*alteredOnce)(nil)
	_ http.RoundTripper  = (*counting)(nil)
)

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	c.mu.Unlock()
	if c.bus != nil {
		c.bus.Advance(d)
	}
	return nil
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// testBus is a real bus on an embedded JetStream, serving workspace
// "newsroom" with a producer connection cms and a consumer connection
// reader.
type testBus struct {
	URL    string
	ns     *server.Server
	st     *store.Store
	srv    *bus.Server
	http   *httptest.Server
	clock  *busClock
	faults atomic.Pointer[publish.Faults]
	dir    string
	// api checks every answer of the bus against docs/openapi.yaml.
	api *openapitest.Checker
}

func busWorkspace() *config.Workspace {
	w := &config.Workspace{
		ID:         workspaceID,
		SigningKey: "newsroom-signing-key-0123456789abcdef0123",
		// A sandbox: tests provoke its 429 and 503 answers (counting.sandbox).
		Sandbox: true,
		Connections: []config.Connection{
			{Name: "cms", SecretHash: config.HashSecret(cmsSecret), Grant: config.Grant{Publish: config.PublishGrant{
				SystemIDs: []string{"cms"}, MessageTypes: []string{"*"}}}},
			{Name: "reader", SecretHash: config.HashSecret(readerSecret), Grant: config.Grant{Consume: config.ConsumeGrant{
				Families: []string{"*"}}}},
		},
	}
	w.Default()
	return w
}

// startBus starts a bus in a fresh directory; Close stops it. With
// natsListen ("127.0.0.1:-1": a free port) its NATS serves clients too.
func startBus(natsListen ...string) (*testBus, error) {
	dir, err := os.MkdirTemp("", "storybus-client-")
	if err != nil {
		return nil, err
	}
	b := &testBus{clock: &busClock{}, dir: dir}
	eo := store.EmbeddedOptions{DataDir: dir}
	if len(natsListen) > 0 {
		eo.Listen = natsListen[0]
	}
	if b.ns, err = store.StartEmbedded(eo); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if b.st, err = store.Connect(store.Options{Embedded: b.ns}); err != nil {
		b.Close()
		return nil, err
	}
	b.srv = bus.New(bus.Options{
		Store: b.st, Clock: b.clock, StoreClock: b.clock, RequestTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
		Faults: func(ctx context.Context, p publish.FaultPoint, id string) error {
			if f := b.faults.Load(); f != nil {
				return (*f)(ctx, p, id)
			}
			return nil
		},
	})
	if err := b.srv.Apply(context.Background(), busWorkspace()); err != nil {
		b.Close()
		return nil, err
	}
	b.api = openapitest.NewChecker(openapitest.PublishPort)
	b.http = httptest.NewServer(b.api.Handler(b.srv.Handler()))
	b.URL = b.http.URL
	return b, nil
}

func (b *testBus) Close() {
	if b.http != nil {
		b.http.Close()
	}
	if b.st != nil {
		b.st.Close()
	}
	if b.ns != nil {
		b.ns.Shutdown()
		b.ns.WaitForShutdown()
	}
	os.RemoveAll(b.dir)
}

func newTestBus(t *testing.T) *testBus {
	t.Helper()
	b, err := startBus()
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the bus stops, then what it answered is
	// reported.
	t.Cleanup(func() { b.api.Report(t) })
	t.Cleanup(b.Close)
	return b
}

// deliveries counts the topic's messages with the message_id, straight
// from the stream.
func (b *testBus) deliveries(t *testing.T, id string) int {
	t.Helper()
	ctx := context.Background()
	stream, err := b.st.JS.Stream(ctx, store.StreamName(workspaceID))
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		if m.Header.Get("Nats-Msg-Id") == id {
			n++
		}
	}
	return n
}

// counting is an http.RoundTripper that records every request to the
// messages route, and can cut the first one short.
type counting struct {
	mu       sync.Mutex
	bodies   [][]byte
	statuses []int
	// firstTimeout, when set, is the deadline of the first publish.
	firstTimeout time.Duration
	tokens       int
	// answer, when set, names the sandbox answer of each publish; it is
	// called with mu held, one publish at a time.
	answer func(n int, id string) string
}

// sandbox has the bus answer the n-th publish (from 0) through this round
// tripper as answer(n, its message_id) names, in the Storybus-Sandbox-Answer
// header: a rule id, or bus.SandboxLost. An empty name lets the bus answer
// for real.
func (c *counting) sandbox(answer func(n int, id string) string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answer = answer
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/tokens") {
		c.mu.Lock()
		c.tokens++
		c.mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	}
	if !strings.HasSuffix(r.URL.Path, "/messages") || r.Method != http.MethodPost {
		return http.DefaultTransport.RoundTrip(r)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	var head struct {
		MessageID string `json:"message_id"`
	}
	_ = json.Unmarshal(body, &head)
	c.mu.Lock()
	n := len(c.bodies)
	first := n == 0
	c.bodies = append(c.bodies, body)
	provoke := ""
	if c.answer != nil {
		provoke = c.answer(n, head.MessageID)
	}
	c.mu.Unlock()
	if provoke != "" {
		r = r.Clone(r.Context())
		r.Header.Set(bus.SandboxAnswerHeader, provoke)
	}
	if first && c.firstTimeout > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), c.firstTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		res, err := http.DefaultTransport.RoundTrip(r)
		if err == nil {
			// Read the body under the short deadline too: the answer
			// may be lost on the way.
			b, rerr := io.ReadAll(res.Body)
			res.Body.Close()
			if rerr != nil {
				return nil, rerr
			}
			res.Body = io.NopCloser(strings.NewReader(string(b)))
			c.record(res.StatusCode)
		}
		return res, err
	}
	res, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		c.record(res.StatusCode)
	}
	return res, err
}

func (c *counting) record(status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statuses = append(c.statuses, status)
}

func (c *counting) Bodies() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.bodies...)
}

func (c *counting) Statuses() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.statuses...)
}

func (c *counting) Tokens() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokens
}

// setup is a client of a bus (real or stub) with a fake clock and an
// outbox in a temporary directory.
type setup struct {
	client *client.Client
	clock  *fakeClock
	rt     *counting
	outbox *client.Outbox
	alerts []*client.Error
	creds  *client.ClientCredentials
}

func newSetup(t *testing.T, url string, busClock *busClock, mutate ...func(*client.Options)) *setup {
	t.Helper()
	s := &setup{clock: newFakeClock(), rt: &counting{}}
	s.clock.bus = busClock
	var err error
	if s.outbox, err = client.OpenOutbox(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: s.rt}
	s.creds = &client.ClientCredentials{URL: url, Workspace: workspaceID, ClientID: "cms", ClientSecret: cmsSecret, HTTPClient: hc, Clock: s.clock}
	var mu sync.Mutex
	o := client.Options{
		URL: url, Workspace: workspaceID, Tokens: s.creds, HTTPClient: hc,
		AttemptTimeout: 5 * time.Second, Outbox: s.outbox, Clock: s.clock,
		Jitter: func() float64 { return 0.5 },
		OnAlert: func(e *client.Error) {
			mu.Lock()
			defer mu.Unlock()
			s.alerts = append(s.alerts, e)
		},
	}
	for _, m := range mutate {
		m(&o)
	}
	if s.client, err = client.New(o); err != nil {
		t.Fatal(err)
	}
	return s
}

// snapshot returns a story.context message.
func snapshot(t testing.TB, id, story string, seq int, state string) *client.Message {
	t.Helper()
	if id == "" {
		id = uuid.NewString()
	}
	payload := map[string]any{"story_id": story, "sequence_number": seq, "state": state, "headline": "Harbour bridge approved"}
	if state == "killed" {
		payload["kill_reason"] = "legal"
	}
	m, err := client.Build(client.Envelope{
		MessageID: id, MessageType: "story.context", SystemID: "cms",
		Timestamp: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC), Payload: payload,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// stub is a bus stand-in: it issues tokens and answers publishes with
// answer, recording every publish body.
type stub struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	ids    []string
	tokens int
	answer func(n int, id string, w http.ResponseWriter, r *http.Request)
}

func newStub(t *testing.T, answer func(n int, id string, w http.ResponseWriter, r *http.Request)) *stub {
	t.Helper()
	s := &stub{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *stub) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/tenants/newsroom/tokens":
		s.mu.Lock()
		s.tokens++
		n := s.tokens
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"token-%d","token_type":"Bearer","expires_in":3600}`, n)
	case r.URL.Path == "/v1/tenants/newsroom/messages":
		body, _ := io.ReadAll(r.Body)
		var head struct {
			MessageID string `json:"message_id"`
		}
		_ = json.Unmarshal(body, &head)
		s.mu.Lock()
		n := len(s.bodies)
		s.bodies = append(s.bodies, body)
		s.ids = append(s.ids, head.MessageID)
		s.mu.Unlock()
		s.answer(n, head.MessageID, w, r)
	default:
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"message":"Missing Authentication Token"}`))
	}
}

func (s *stub) Bodies() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.bodies...)
}

func (s *stub) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

func (s *stub) Tokens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens
}

// refusal writes an answer in the refusal shape.
func refusal(w http.ResponseWriter, status int, rule, message, path string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if w.Header().Get("Retry-After") == "" {
			w.Header().Set("Retry-After", "1")
		}
	}
	w.WriteHeader(status)
	v := map[string]string{"source": "policy", "rule": rule, "message": message}
	if path != "" {
		v["path"] = path
	}
	b, _ := json.Marshal(map[string]any{"accepted": false, "violations": []any{v}})
	_, _ = w.Write(b)
}

func accepted(w http.ResponseWriter, id string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, `{"accepted":true,"message_id":%q,"message_type":"story.context","family":"story-context","tolerated":[]}`, id)
}

// eventually polls cond until it holds, for up to 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.EventuallyTrue(t, what, 20*time.Second, cond)
}
