package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/storybus/storybus/client"
	"github.com/storybus/storybus/rules"
)

func TestBackoffDoublesWithJitterCappedAt30s(t *testing.T) {
	p := client.DefaultRetryPolicy()
	nominal := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, want := range nominal {
		n := i + 1
		if lo, hi := p.Backoff(n, 0), p.Backoff(n, 1); lo != want/2 || hi != want {
			t.Errorf("retry %d waits %s to %s, want %s to %s", n, lo, hi, want/2, want)
		}
		if mid := p.Backoff(n, 0.5); mid <= p.Backoff(n, 0) || mid >= p.Backoff(n, 1) {
			t.Errorf("retry %d: jitter has no effect", n)
		}
	}
	if p.Backoff(1000, 0.99) > 30*time.Second {
		t.Error("the cap does not hold")
	}
	if got := p.MinTotalWait(); got < client.MinRetryWindow {
		t.Errorf("the default policy can give up after %s", got)
	}
	if err := p.Validate(); err != nil {
		t.Error(err)
	}
	if err := (client.RetryPolicy{Attempts: 4}).Validate(); err == nil {
		t.Error("a policy that gives up after seconds is valid")
	}
}

func TestClientCredentialsCachesUntilNearExpiry(t *testing.T) {
	var mu sync.Mutex
	var calls int
	var auth []string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		id, secret, _ := r.BasicAuth()
		mu.Lock()
		calls++
		auth = append(auth, id+":"+secret)
		n := calls
		mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/tenants/newsroom/tokens" || secret != cmsSecret ||
			r.PostFormValue("grant_type") != "client_credentials" {
			refusal(w, http.StatusUnauthorized, "auth.credentials.invalid", "unknown client id or wrong secret", "")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"t%d","token_type":"Bearer","expires_in":600}`, n)
	})
	clock := newFakeClock()
	cc := &client.ClientCredentials{URL: srv.URL, Workspace: workspaceID, ClientID: "cms", ClientSecret: cmsSecret, Clock: clock}
	ctx := context.Background()
	tok := func() string {
		s, err := cc.Token(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if a, b := tok(), tok(); a != "t1" || b != "t1" {
		t.Fatalf("tokens %s %s", a, b)
	}
	clock.Advance(539 * time.Second)
	if got := tok(); got != "t1" {
		t.Fatalf("refreshed early: %s", got)
	}
	clock.Advance(2 * time.Second) // inside the last minute
	if got := tok(); got != "t2" {
		t.Fatalf("not refreshed near expiry: %s", got)
	}
	cc.Invalidate("t1") // an old token: no effect
	if got := tok(); got != "t2" {
		t.Fatalf("invalidating another token dropped the cache: %s", got)
	}
	cc.Invalidate("t2")
	if got := tok(); got != "t3" {
		t.Fatalf("not refreshed after invalidation: %s", got)
	}
	if auth[0] != "cms:"+cmsSecret {
		t.Fatalf("basic credentials %q", auth[0])
	}
	bad := &client.ClientCredentials{URL: srv.URL, Workspace: workspaceID, ClientID: "cms", ClientSecret: "wrong"}
	_, err := bad.Token(ctx)
	if client.StatusOf(err) != http.StatusUnauthorized || client.RuleOf(err) != "auth.credentials.invalid" {
		t.Fatalf("refused credentials: %v", err)
	}
}

func TestConsumerRunHandlesEachMessageIDOnce(t *testing.T) {
	var mu sync.Mutex
	var acked []string
	pulls := 0
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/tokens"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"access_token":"t","token_type":"Bearer","expires_in":3600}`)
		case strings.HasSuffix(r.URL.Path, "/consumers/desk/messages"):
			pulls++
			if q := r.URL.Query(); q.Get("family") != "story-context" || q.Get("max") != "10" || q.Get("wait") != "20s" {
				t.Errorf("query %s", r.URL.RawQuery)
			}
			switch pulls {
			case 1: // the same message twice, and a second one
				fmt.Fprint(w, `{"messages":[`+delivery("m1", "a1", 1)+`,`+delivery("m1", "a2", 2)+`,`+delivery("m2", "a3", 1)+`]}`)
			case 2:
				w.Header().Set("Retry-After", "3")
				refusal(w, http.StatusServiceUnavailable, "bus.unavailable", "internal error", "")
			case 3: // redelivered after the ack timeout
				fmt.Fprint(w, `{"messages":[`+delivery("m2", "a4", 2)+`]}`)
			default:
				fmt.Fprint(w, `{"messages":[]}`)
			}
		case strings.HasSuffix(r.URL.Path, "/consumers/desk/acks"):
			var req struct {
				AckIDs []string `json:"ack_ids"`
			}
			_ = json.NewDecoder(r.Body).Decode(&req)
			acked = append(acked, req.AckIDs...)
			fmt.Fprintf(w, `{"acked":%d}`, len(req.AckIDs))
		}
	})
	clock := newFakeClock()
	c, err := client.NewConsumer(client.ConsumerOptions{
		URL: srv.URL, Workspace: workspaceID, Name: "desk", Families: []string{"story-context"},
		Tokens: client.StaticToken("t"), Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var handled []string
	failed := false
	err = c.Run(ctx, func(_ context.Context, d client.Delivery) error {
		if d.MessageID == "m2" && !failed {
			failed = true
			return fmt.Errorf("handler failed") // not acknowledged: redelivered
		}
		handled = append(handled, d.MessageID+"/"+d.AckID)
		if len(handled) == 2 {
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(handled, " ") != "m1/a1 m2/a4" {
		t.Fatalf("handled %v", handled)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(acked, " ") != "a1 a2 a4" {
		t.Fatalf("acked %v", acked)
	}
	if s := clock.Sleeps(); len(s) != 1 || s[0] < 3*time.Second {
		t.Fatalf("did not back off after the 503: %v", s)
	}
}

func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func delivery(id, ack string, n int) string {
	return fmt.Sprintf(`{"message_id":%q,"message_type":"story.context","family":"story-context","ack_id":%q,"delivery":%d,"message":{"message_id":%q}}`, id, ack, n, id)
}

func TestConsumerAgainstTheBus(t *testing.T) {
	b := newTestBus(t)
	s := newSetup(t, b.URL, b.clock)
	var pretty bytes.Buffer
	m := snapshot(t, "", "story-c", 1, "draft")
	_ = json.Indent(&pretty, m.Bytes(), "", "\t")
	indented, _ := client.NewMessage(pretty.Bytes())
	if _, err := s.client.Publish(context.Background(), indented); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewConsumer(client.ConsumerOptions{
		URL: b.URL, Workspace: workspaceID, Name: "web", Wait: time.Second,
		Tokens: &client.ClientCredentials{URL: b.URL, Workspace: workspaceID, ClientID: "reader", ClientSecret: readerSecret},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got client.Delivery
	if err := c.Run(ctx, func(_ context.Context, d client.Delivery) error {
		got = d
		cancel()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got.MessageID != m.ID() || !bytes.Equal(got.Message, pretty.Bytes()) || got.Family != "story-context" || got.Delivery != 1 {
		t.Fatalf("delivery %+v", got)
	}
	if c.Dedup().Len() != 1 {
		t.Fatal("not remembered")
	}
	// A consumer may read only what the connection is granted.
	cms, _ := client.NewConsumer(client.ConsumerOptions{URL: b.URL, Workspace: workspaceID, Name: "cms", Tokens: s.creds})
	_, err = cms.Fetch(context.Background())
	if client.StatusOf(err) != http.StatusForbidden || client.RuleOf(err) != "grant.family" {
		t.Fatalf("ungranted: %v", err)
	}
}

// Nak, InProgress and Term reach the bus's ack route with their actions.
func TestConsumerSettlesDeliveries(t *testing.T) {
	b := newTestBus(t)
	s := newSetup(t, b.URL, b.clock)
	for _, story := range []string{"story-n", "story-t"} {
		if _, err := s.client.Publish(context.Background(), snapshot(t, "", story, 1, "draft")); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.NewConsumer(client.ConsumerOptions{
		URL: b.URL, Workspace: workspaceID, Name: "settle", Wait: time.Second, Max: 10,
		Tokens: &client.ClientCredentials{URL: b.URL, Workspace: workspaceID, ClientID: "reader", ClientSecret: readerSecret},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fetch := func(n int) []client.Delivery {
		t.Helper()
		var got []client.Delivery
		for deadline := time.Now().Add(20 * time.Second); len(got) < n && time.Now().Before(deadline); {
			ds, err := c.Fetch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ds...)
		}
		if len(got) != n {
			t.Fatalf("fetched %d of %d", len(got), n)
		}
		return got
	}
	ds := fetch(2)
	if err := c.InProgress(ctx, ds...); err != nil {
		t.Fatal(err)
	}
	if err := c.Nak(ctx, 0, ds[0]); err != nil {
		t.Fatal(err)
	}
	again := fetch(1)[0]
	if again.MessageID != ds[0].MessageID || again.Delivery != 2 {
		t.Fatalf("after a nak: %+v", again)
	}
	if err := c.Term(ctx, again); err != nil {
		t.Fatal(err)
	}
	if err := c.Nak(ctx, time.Minute, ds[1]); err != nil {
		t.Fatal(err)
	}
	if rest, err := c.Fetch(ctx); err != nil || len(rest) != 0 {
		t.Fatalf("delivered again: %+v %v", rest, err)
	}
	if err := c.Nak(ctx, 2*time.Hour, ds[1]); client.RuleOf(err) != "consumer.request_invalid" {
		t.Fatalf("a delay over an hour: %v", err)
	}
	// The bus counted each action as the client named it.
	rec := httptest.NewRecorder()
	b.srv.OpsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for action, n := range map[string]int{"in_progress": 2, "nak": 2, "term": 1} {
		want := fmt.Sprintf(`storybus_consumer_acked_messages_total{action=%q,connection="reader",workspace="newsroom"} %d`, action, n)
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestDedupIsBounded(t *testing.T) {
	clock := newFakeClock()
	d := client.NewDedup(3, time.Hour, clock)
	for _, id := range []string{"a", "b", "c", "d"} {
		d.Done(id)
	}
	if d.Seen("a") || !d.Seen("b") || !d.Seen("d") || d.Len() != 3 {
		t.Fatalf("size bound: a %v b %v len %d", d.Seen("a"), d.Seen("b"), d.Len())
	}
	clock.Advance(time.Hour)
	if d.Seen("d") {
		t.Fatal("remembered past the window")
	}
	d.Done("e")
	if d.Len() != 1 {
		t.Fatalf("expired ids kept: %d", d.Len())
	}
}

// The rule ids the client branches on are the bus's, with the statuses the
// client expects.
func TestRuleIDsAreCatalogued(t *testing.T) {
	for id, status := range map[string]int{
		client.RuleMessageTooLarge: 413, client.RuleMessageNotJSON: 400, client.RuleRequestBlocked: 403,
		client.RuleMessageIDReused: 409, client.RuleMessageInFlight: 503, client.RuleSuperseded: 409,
		client.RuleSequenceStale: 409, client.RuleSequenceTerminal: 409, client.RuleStoryNotOwner: 409,
		client.RuleCommitContention: 409, client.RuleRateLimited: 429, client.RuleQuotaExceeded: 429,
	} {
		r, ok := rules.Lookup(id)
		if !ok || r.Status != status {
			t.Errorf("%s: catalogued %v with status %d, want %d", id, ok, r.Status, status)
		}
	}
}

// A kept message the bus refuses on a resend moves to the refused
// entries; the story's next kept message is sent after it.
func TestResendMovesRefusedEntries(t *testing.T) {
	st := newStub(t, func(_ int, id string, w http.ResponseWriter, _ *http.Request) {
		if strings.HasPrefix(id, "00000000") {
			refusal(w, http.StatusConflict, client.RuleSuperseded, "superseded", "/payload/sequence_number")
			return
		}
		accepted(w, id)
	})
	s := newSetup(t, st.URL, nil)
	old := snapshot(t, "00000000-0000-4000-8000-00000000000a", "story-x", 1, "draft")
	next := snapshot(t, "", "story-x", 2, "draft")
	for _, m := range []*client.Message{old, next} {
		if _, err := s.outbox.Put(m, nil, s.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	results, err := s.client.Resend(context.Background())
	if err != nil || len(results) != 2 {
		t.Fatalf("%+v %v", results, err)
	}
	if !client.IsRefused(results[0].Err) || !results[0].Entry.Refused || results[1].Result == nil {
		t.Fatalf("results %+v", results)
	}
	refused, _ := s.outbox.Refused()
	if len(refused) != 1 || refused[0].Rule != client.RuleSuperseded || !bytes.Equal(refused[0].Message, old.Bytes()) {
		t.Fatalf("refused %+v", refused)
	}
	if pending, _ := s.outbox.List(); len(pending) != 0 {
		t.Fatalf("pending %+v", pending)
	}
	if ids := st.IDs(); len(ids) != 2 || ids[0] != old.ID() || ids[1] != next.ID() {
		t.Fatalf("order %v", ids)
	}
}

func TestMessageKeepsItsBytes(t *testing.T) {
	raw := []byte("{ \"message_id\" : \"x\",\n \"message_type\":\"story.event\", \"payload\": {\"story_id\":\"s1\"} }")
	m, err := client.NewMessage(raw)
	if err != nil {
		t.Fatal(err)
	}
	raw[0] = 'X' // the caller's slice is not the message
	if m.Bytes()[0] != '{' || m.ID() != "x" || m.Key() != "story:s1" || m.Snapshot() {
		t.Fatalf("message %s %s %s", m.Bytes(), m.ID(), m.Key())
	}
	for _, bad := range []string{"", "[1]", "not json", `{"a":`} {
		if _, err := client.NewMessage([]byte(bad)); err == nil {
			t.Errorf("%q is a message", bad)
		}
	}
	a, _ := client.NewMessage([]byte(`{"message_id":"a","message_type":"asset.reference","payload":{"asset_id":"img-1"}}`))
	if a.Key() != "asset:img-1" {
		t.Fatalf("asset key %s", a.Key())
	}
}

// An OpenDedup file keeps the handled ids across a restart, within the
// window and the size, skips a torn last line, and is rewritten before it
// grows past twice the size.
func TestDedupFileSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seen")
	clock := newFakeClock()
	d, err := client.OpenDedup(path, 3, time.Hour, clock)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := d.Done(id); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(30 * time.Minute)
	if err := d.Done("c"); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// The process stopped in the middle of a line.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("17"); err != nil {
		t.Fatal(err)
	}
	f.Close()

	reopen := func() *client.Dedup {
		t.Helper()
		d, err := client.OpenDedup(path, 3, time.Hour, clock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	d = reopen()
	if !d.Seen("a") || !d.Seen("b") || !d.Seen("c") || d.Len() != 3 {
		t.Fatalf("after a restart: a %v b %v c %v len %d", d.Seen("a"), d.Seen("b"), d.Seen("c"), d.Len())
	}
	// a and b leave the window; c stays.
	clock.Advance(45 * time.Minute)
	d.Close()
	d = reopen()
	if d.Seen("a") || d.Seen("b") || !d.Seen("c") || d.Len() != 1 {
		t.Fatalf("after the window: a %v b %v c %v len %d", d.Seen("a"), d.Seen("b"), d.Seen("c"), d.Len())
	}
	for i := range 20 {
		if err := d.Done("id-" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := bytes.Count(b, []byte("\n")); lines > 6 {
		t.Fatalf("the file has %d lines for a size of 3", lines)
	}
	if err := d.Done("two\nlines"); err == nil || !d.Seen("two\nlines") {
		t.Fatalf("an id with a line break: %v", err)
	}
	d.Close()
	if err := d.Done("after-close"); err == nil {
		t.Fatal("Done after Close wrote nothing and said nothing")
	}
	d = reopen()
	if !d.Seen("id-19") || !d.Seen("id-17") || d.Seen("id-16") || d.Seen("c") || d.Seen("two") || d.Len() != 3 {
		t.Fatal("the rewritten file does not hold the newest ids")
	}
}

// A message published inside a trace is handled inside the same trace:
// the client sends the caller's traceparent, the bus keeps it in the
// message's headers and the pull API returns it, and the consumer's
// handler span is a child of the producer's span.
func TestConsumerContinuesTheProducersTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := newTestBus(t)
	s := newSetup(t, b.URL, b.clock)
	ctx, producer := tp.Tracer("cms").Start(context.Background(), "share story")
	m := snapshot(t, "", "story-traced", 1, "draft")
	if _, err := s.client.Publish(ctx, m); err != nil {
		t.Fatal(err)
	}
	producer.End()
	c, err := client.NewConsumer(client.ConsumerOptions{
		URL: b.URL, Workspace: workspaceID, Name: "traced", Wait: time.Second, TracerProvider: tp,
		Tokens: &client.ClientCredentials{URL: b.URL, Workspace: workspaceID, ClientID: "reader", ClientSecret: readerSecret},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var inHandler trace.SpanContext
	if err := c.Run(runCtx, func(ctx context.Context, d client.Delivery) error {
		if d.MessageID == m.ID() {
			inHandler = trace.SpanContextFromContext(ctx)
			cancel()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := producer.SpanContext()
	if inHandler.TraceID() != want.TraceID() {
		t.Fatalf("handler in trace %s, producer in %s", inHandler.TraceID(), want.TraceID())
	}
	var handled []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "handle story-context" {
			handled = append(handled, s)
		}
	}
	if len(handled) != 1 || handled[0].Parent.SpanID() != want.SpanID() || handled[0].SpanKind != trace.SpanKindConsumer {
		t.Fatalf("handler spans %+v, want one child of the producer's span %s", handled, want.SpanID())
	}
}

// TestClientCredentialsReadsOAuth2Errors gets tokens from a real bus
// through the OAuth2 client, and reads each of the token endpoint's OAuth2
// errors into an *Error with its status, error code and rule, classified
// for the producer.
func TestClientCredentialsReadsOAuth2Errors(t *testing.T) {
	b := newTestBus(t)
	ctx := context.Background()
	cc := &client.ClientCredentials{URL: b.URL, Workspace: workspaceID, ClientID: "cms", ClientSecret: cmsSecret}
	tr, err := cc.Fetch(ctx)
	if err != nil || tr.AccessToken == "" || tr.TokenType != "Bearer" || tr.ExpiresIn != 3600 {
		t.Fatalf("token %+v %v", tr, err)
	}

	wrong := &client.ClientCredentials{URL: b.URL, Workspace: workspaceID, ClientID: "cms", ClientSecret: "wrong"}
	_, err = wrong.Token(ctx)
	e, ok := client.AsError(err)
	if !ok || e.Status != http.StatusUnauthorized || e.OAuth2 != "invalid_client" || e.Rule != "auth.credentials.invalid" ||
		e.Text == "" || e.Temporary() || !e.NeedsAlert() || e.Class() != client.ClassNotAllowed {
		t.Fatalf("wrong secret: %#v", err)
	}
	if !strings.Contains(e.Error(), "401 auth.credentials.invalid (OAuth2 invalid_client)") {
		t.Fatalf("error text %q", e.Error())
	}

	// Nine more failures lock cms out: 429, temporary, with Retry-After.
	for range 9 {
		if _, err := wrong.Fetch(ctx); client.StatusOf(err) != http.StatusUnauthorized {
			t.Fatalf("failure: %v", err)
		}
	}
	_, err = cc.Fetch(ctx)
	if e, ok := client.AsError(err); !ok || e.Status != http.StatusTooManyRequests || e.OAuth2 != "invalid_client" ||
		e.Rule != "auth.attempts.exceeded" || !e.Temporary() || e.RetryAfter != 10*time.Minute {
		t.Fatalf("locked out: %#v", err)
	}

	cfg := busWorkspace()
	cfg.Connections[1].Active = new(bool)
	if err := b.srv.Apply(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	reader := &client.ClientCredentials{URL: b.URL, Workspace: workspaceID, ClientID: "reader", ClientSecret: readerSecret}
	_, err = reader.Token(ctx)
	if e, ok := client.AsError(err); !ok || e.Status != http.StatusBadRequest || e.OAuth2 != client.OAuth2UnauthorizedClient ||
		e.Rule != "connection.inactive" || e.Temporary() || e.Class() != client.ClassNotAllowed || !strings.Contains(e.Advice(), "configuration") {
		t.Fatalf("inactive connection: %#v", err)
	}
}
