package client_test

// The "Test it" table of the bus's "Retries and idempotency" page, against
// a real bus on an embedded JetStream; its 429 and 503 rows provoked on that
// bus, a sandbox workspace.

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/client"
)

// A duplicate: send the same message twice → 200, duplicate: true.
func TestTestIt_ADuplicateIs200Duplicate(t *testing.T) {
	b := newTestBus(t)
	s := newSetup(t, b.URL, b.clock)
	m := snapshot(t, "", "story-dup", 1, "draft")
	res, err := s.client.Publish(context.Background(), m)
	if err != nil || res.Status != http.StatusAccepted || res.Duplicate || res.Family != "story-context" {
		t.Fatalf("first: %+v %v", res, err)
	}
	res, err = s.client.Publish(context.Background(), m)
	if err != nil || res.Status != http.StatusOK || !res.Duplicate || res.MessageID != m.ID() {
		t.Fatalf("second: %+v %v", res, err)
	}
	if n := b.deliveries(t, m.ID()); n != 1 {
		t.Fatalf("%d deliveries", n)
	}
}

// A lost answer: a client timeout of a few milliseconds, then the retry →
// 202 or 200 duplicate, perhaps after 503 message.in_flight; a consumer
// receives the message exactly once.
func TestTestIt_ALostAnswerIsDeliveredOnce(t *testing.T) {
	b := newTestBus(t)
	reader := newReader(t, b, "lost-answer")
	for i, timeout := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 5 * time.Millisecond, 8 * time.Millisecond} {
		s := newSetup(t, b.URL, b.clock)
		s.rt.firstTimeout = timeout
		m := snapshot(t, "", "story-lost", i+1, "draft")
		res, err := s.client.Publish(context.Background(), m)
		if err != nil {
			t.Fatalf("timeout %s: %v", timeout, err)
		}
		if res.Status != http.StatusAccepted && !(res.Status == http.StatusOK && res.Duplicate) {
			t.Fatalf("timeout %s: final answer %d", timeout, res.Status)
		}
		statuses := s.rt.Statuses()
		for _, st := range statuses[:max(len(statuses)-1, 0)] {
			if st != http.StatusServiceUnavailable {
				t.Fatalf("timeout %s: answers before the last %v", timeout, statuses)
			}
		}
		for _, body := range s.rt.Bodies() {
			if !bytes.Equal(body, m.Bytes()) {
				t.Fatalf("a retry sent other bytes")
			}
		}
		if n := b.deliveries(t, m.ID()); n != 1 {
			t.Fatalf("timeout %s: %d deliveries of %s", timeout, n, m.ID())
		}
		reader.expectOnce(t, m.ID())
	}
}

// A lost answer for certain: the bus (a sandbox) publishes the message and
// closes the connection without an answer; the client's retry gets 200
// duplicate, and a consumer receives the message exactly once.
func TestTestIt_AProvokedLostAnswerIsDeliveredOnce(t *testing.T) {
	b := newTestBus(t)
	reader := newReader(t, b, "provoked-lost-answer")
	s := newSetup(t, b.URL, b.clock)
	s.rt.sandbox(func(n int, _ string) string {
		if n == 0 {
			return bus.SandboxLost
		}
		return ""
	})
	m := snapshot(t, "", "story-provoked-lost", 1, "draft")
	res, err := s.client.Publish(context.Background(), m)
	if err != nil || res.Status != http.StatusOK || !res.Duplicate || res.Attempts != 2 {
		t.Fatalf("%+v %v", res, err)
	}
	if got := s.rt.Statuses(); !slices.Equal(got, []int{http.StatusOK}) {
		t.Fatalf("answers %v, want only the retry's", got)
	}
	for _, body := range s.rt.Bodies() {
		if !bytes.Equal(body, m.Bytes()) {
			t.Fatal("the retry sent other bytes")
		}
	}
	if n := b.deliveries(t, m.ID()); n != 1 {
		t.Fatalf("%d deliveries", n)
	}
	reader.expectOnce(t, m.ID())
}

// A reused id: change one field and resend with the same message_id →
// 409 message_id.reused.
func TestTestIt_AReusedIDIs409(t *testing.T) {
	b := newTestBus(t)
	s := newSetup(t, b.URL, b.clock)
	id := "2d5f0b7e-8c1a-4f3e-9b6d-1a2b3c4d5e6f"
	if _, err := s.client.Publish(context.Background(), snapshot(t, id, "story-r", 1, "draft")); err != nil {
		t.Fatal(err)
	}
	changed := snapshot(t, id, "story-r", 1, "ready")
	_, err := s.client.Publish(context.Background(), changed)
	e, ok := client.AsError(err)
	if !ok || e.Status != http.StatusConflict || e.Rule != client.RuleMessageIDReused {
		t.Fatalf("got %v", err)
	}
	if e.Attempts != 1 || e.Kept || !e.NeedsAlert() || e.Class() != client.ClassInvalid || len(e.RequestID) != 32 {
		t.Fatalf("reused id handled as %+v", e)
	}
	if len(s.rt.Bodies()) != 2 {
		t.Fatalf("%d sends", len(s.rt.Bodies()))
	}
}

// 401, then recovery: an expired or altered token → one refresh, then
// success.
func TestTestIt_401RefreshesOnceAndSucceeds(t *testing.T) {
	t.Run("expired", func(t *testing.T) {
		b := newTestBus(t)
		s := newSetup(t, b.URL, b.clock)
		if _, err := s.client.Publish(context.Background(), snapshot(t, "", "story-t", 1, "draft")); err != nil {
			t.Fatal(err)
		}
		// The bus's time moves past the cached token's expiry; the
		// client's does not, so it sends the expired token.
		b.clock.Advance(2 * time.Hour)
		res, err := s.client.Publish(context.Background(), snapshot(t, "", "story-t", 2, "draft"))
		if err != nil || res.Status != http.StatusAccepted {
			t.Fatalf("%+v %v", res, err)
		}
		if got := s.rt.Statuses(); len(got) != 3 || got[1] != http.StatusUnauthorized {
			t.Fatalf("statuses %v", got)
		}
		if s.rt.Tokens() != 2 || len(s.clock.Sleeps()) != 0 {
			t.Fatalf("%d token requests, sleeps %v", s.rt.Tokens(), s.clock.Sleeps())
		}
	})
	t.Run("altered", func(t *testing.T) {
		b := newTestBus(t)
		s := newSetup(t, b.URL, b.clock)
		altered := &alteredOnce{inner: s.creds}
		c, err := client.New(client.Options{URL: b.URL, Workspace: workspaceID, Tokens: altered,
			HTTPClient: &http.Client{Transport: s.rt}, Clock: s.clock, Outbox: s.outbox})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Publish(context.Background(), snapshot(t, "", "story-a", 1, "draft"))
		if err != nil || res.Status != http.StatusAccepted || res.Attempts != 2 {
			t.Fatalf("%+v %v", res, err)
		}
		if got := s.rt.Statuses(); len(got) != 2 || got[0] != http.StatusUnauthorized {
			t.Fatalf("statuses %v", got)
		}
	})
}

// alteredOnce hands out a tampered token until the client invalidates it.
type alteredOnce struct {
	inner       *client.ClientCredentials
	invalidated bool
}

func (a *alteredOnce) Token(ctx context.Context) (string, error) {
	tok, err := a.inner.Token(ctx)
	if err != nil || a.invalidated {
		return tok, err
	}
	last := "A"
	if strings.HasSuffix(tok, "A") {
		last = "B"
	}
	return tok[:len(tok)-1] + last, nil
}

func (a *alteredOnce) Invalidate(tok string) {
	a.invalidated = true
	a.inner.Invalidate(tok)
}

// A 401 after the fresh token is configuration: stop, alert, keep.
func TestTestIt_401TwiceStops(t *testing.T) {
	st := newStub(t, func(_ int, _ string, w http.ResponseWriter, _ *http.Request) {
		refusal(w, http.StatusUnauthorized, "auth.token.invalid", "the token is malformed or badly signed", "")
	})
	s := newSetup(t, st.URL, nil)
	_, err := s.client.Publish(context.Background(), snapshot(t, "", "story-401", 1, "draft"))
	e, ok := client.AsError(err)
	if !ok || e.Status != http.StatusUnauthorized || e.Attempts != 2 || !e.Kept || e.Class() != client.ClassNotAllowed {
		t.Fatalf("got %#v", err)
	}
	if len(st.Bodies()) != 2 || st.Tokens() != 2 || len(s.clock.Sleeps()) != 0 || len(s.alerts) != 1 {
		t.Fatalf("%d sends, %d tokens, sleeps %v, %d alerts", len(st.Bodies()), st.Tokens(), s.clock.Sleeps(), len(s.alerts))
	}
}

// 429 and 503, provoked on a real bus (a sandbox): retried with the same
// bytes, honouring Retry-After, until the success, which publishes the
// message once.
func TestTestIt_429And503AreRetried(t *testing.T) {
	b := newTestBus(t)
	s := newSetup(t, b.URL, b.clock)
	s.rt.sandbox(func(n int, _ string) string {
		return []string{client.RuleRateLimited, "bus.publish_failed", client.RuleMessageInFlight, ""}[min(n, 3)]
	})
	m := snapshot(t, "", "story-429", 1, "draft")
	res, err := s.client.Publish(context.Background(), m)
	if err != nil || res.Status != http.StatusAccepted || res.Attempts != 4 {
		t.Fatalf("%+v %v", res, err)
	}
	if got := s.rt.Statuses(); !slices.Equal(got, []int{429, 503, 503, 202}) {
		t.Fatalf("statuses %v", got)
	}
	// The backoff alone waits at most 0.5 s, 1 s and 2 s: the bus's
	// Retry-After (1 s, 1 s, 30 s) is longer the first and last time.
	sleeps := s.clock.Sleeps()
	if len(sleeps) != 3 || sleeps[0] < time.Second || sleeps[2] < publish.Lease {
		t.Fatalf("sleeps %v do not honour Retry-After", sleeps)
	}
	for _, body := range s.rt.Bodies() {
		if !bytes.Equal(body, m.Bytes()) {
			t.Fatal("a retry sent other bytes")
		}
	}
	if n := b.deliveries(t, m.ID()); n != 1 {
		t.Fatalf("published %d times", n)
	}
}

// reader is a consumer of every family over the HTTP pull API.
type reader struct {
	c    *client.Consumer
	seen map[string]int
}

func newReader(t *testing.T, b *testBus, name string) *reader {
	t.Helper()
	c, err := client.NewConsumer(client.ConsumerOptions{
		URL: b.URL, Workspace: workspaceID, Name: name, Wait: time.Second,
		Tokens: &client.ClientCredentials{URL: b.URL, Workspace: workspaceID, ClientID: "reader", ClientSecret: readerSecret},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{c: c, seen: map[string]int{}}
	if _, err := c.Fetch(context.Background()); err != nil { // creates the consumer
		t.Fatal(err)
	}
	return r
}

// expectOnce pulls until the message came, then once more, and fails
// unless it came exactly once.
func (r *reader) expectOnce(t *testing.T, id string) {
	t.Helper()
	pull := func() {
		ds, err := r.c.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			r.seen[d.MessageID]++
		}
		if err := r.c.Ack(context.Background(), ds...); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "delivery of "+id, func() bool { pull(); return r.seen[id] > 0 })
	pull()
	if r.seen[id] != 1 {
		t.Fatalf("%s delivered %d times", id, r.seen[id])
	}
}

// Retries of a message whose context ended are kept, not dropped.
func TestTestIt_ACancelledPublishIsKept(t *testing.T) {
	b := newTestBus(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := newSetup(t, b.URL, nil, func(o *client.Options) {
		o.Clock = cancelOnSleep{fake: newFakeClock(), cancel: cancel}
	})
	s.rt.sandbox(func(int, string) string { return "bus.publish_failed" })
	m := snapshot(t, "", "story-c", 1, "draft")
	_, err := s.client.Publish(ctx, m)
	if !client.IsKept(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	list, _ := s.outbox.List()
	if len(list) != 1 || !bytes.Equal(list[0].Message, m.Bytes()) || list[0].Rule != "bus.publish_failed" {
		t.Fatalf("outbox %+v", list)
	}
	if n := b.deliveries(t, m.ID()); n != 0 {
		t.Fatalf("published %d times", n)
	}
}

// cancelOnSleep ends the publish's context at its first wait.
type cancelOnSleep struct {
	fake   *fakeClock
	cancel context.CancelFunc
}

func (c cancelOnSleep) Now() time.Time { return c.fake.Now() }
func (c cancelOnSleep) Sleep(ctx context.Context, _ time.Duration) error {
	c.cancel()
	return ctx.Err()
}

// 507 workspace.storage_full, provoked on a real bus (a sandbox): no
// Retry-After, so the client backs off, then keeps the message when its
// attempts run out; resent once the platform has made room, it is
// published once.
func TestTestIt_AFullTopicIsKeptThenResent(t *testing.T) {
	b := newTestBus(t)
	s := newSetup(t, b.URL, b.clock)
	s.rt.sandbox(func(int, string) string { return "workspace.storage_full" })
	m := snapshot(t, "", "story-full", 1, "draft")
	_, err := s.client.Publish(context.Background(), m)
	e, ok := client.AsError(err)
	if !ok || !e.Kept || e.Status != http.StatusInsufficientStorage || e.Rule != "workspace.storage_full" || e.Class() != client.ClassNotDelivered {
		t.Fatalf("got %v", err)
	}
	sleeps := s.clock.Sleeps()
	if len(sleeps) == 0 || sleeps[0] > time.Second {
		t.Fatalf("sleeps %v: want the backoff, starting under a second", sleeps)
	}
	list, _ := s.outbox.List()
	if len(list) != 1 || list[0].Rule != "workspace.storage_full" || !bytes.Equal(list[0].Message, m.Bytes()) {
		t.Fatalf("outbox %+v", list)
	}

	s.rt.sandbox(func(int, string) string { return "" })
	results, err := s.client.Resend(context.Background())
	if err != nil || len(results) != 1 || results[0].Result == nil || results[0].Result.Status != http.StatusAccepted {
		t.Fatalf("resend: %+v %v", results, err)
	}
	if n := b.deliveries(t, m.ID()); n != 1 {
		t.Fatalf("published %d times", n)
	}
}
