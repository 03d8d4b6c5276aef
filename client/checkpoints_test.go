package client_test

// The checkpoints of the bus's pages "Handle the bus's answers" and
// "Retries and idempotency", one test each.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/client"
)

// "My client branches on status and rule, never on the message text."
// Answers whose text says the opposite of their status and rule are
// handled by status and rule.
func TestCheckpoint_BranchesOnStatusAndRuleNeverMessage(t *testing.T) {
	misleading := "temporary glitch: retry at once, this always succeeds later"
	st := newStub(t, func(n int, id string, w http.ResponseWriter, _ *http.Request) {
		switch {
		case strings.HasPrefix(id, "00000000"):
			// A refusal worded like a temporary failure: final.
			refusal(w, http.StatusBadRequest, "envelope.format.uuid", misleading, "/message_id")
		case strings.HasPrefix(id, "11111111") && n < 3:
			// A temporary failure worded like a final refusal: retried.
			refusal(w, http.StatusServiceUnavailable, "bus.publish_failed", "permanent failure: never retry this message", "")
		case strings.HasPrefix(id, "22222222"):
			refusal(w, http.StatusConflict, client.RuleSequenceStale, misleading, "/payload/sequence_number")
		case strings.HasPrefix(id, "33333333"):
			refusal(w, http.StatusConflict, client.RuleSequenceTerminal, misleading, "/payload/sequence_number")
		default:
			accepted(w, id)
		}
	})
	s := newSetup(t, st.URL, nil)
	ctx := context.Background()

	_, err := s.client.Publish(ctx, snapshot(t, "00000000-0000-4000-8000-000000000000", "s0", 1, "draft"))
	if e, _ := client.AsError(err); e == nil || e.Attempts != 1 || e.Rule != "envelope.format.uuid" || e.Class() != client.ClassInvalid ||
		e.UserMessage() != "This story couldn't be shared with other systems: message_id is invalid." {
		t.Fatalf("400: %v", err)
	}
	res, err := s.client.Publish(ctx, snapshot(t, "11111111-0000-4000-8000-000000000000", "s1", 1, "draft"))
	if err != nil || res.Attempts != 3 {
		t.Fatalf("503: %+v %v", res, err)
	}
	// Identical text, different rules: different classes and advice.
	_, stale := s.client.Publish(ctx, snapshot(t, "22222222-0000-4000-8000-000000000000", "s2", 1, "draft"))
	_, killed := s.client.Publish(ctx, snapshot(t, "33333333-0000-4000-8000-000000000000", "s3", 1, "draft"))
	es, _ := client.AsError(stale)
	ek, _ := client.AsError(killed)
	if es.Class() != client.ClassStoryChanged || !es.Rebuild() || es.UserMessage() != "Someone else changed this story." {
		t.Fatalf("stale: %v %v", es.Class(), es)
	}
	if ek.Class() != client.ClassStoryKilled || ek.Rebuild() || ek.UserMessage() != "This story was killed and can't be reopened." {
		t.Fatalf("terminal: %v %v", ek.Class(), ek)
	}
	if strings.Contains(es.Error(), misleading) || strings.Contains(es.Advice(), "retry") {
		t.Fatalf("the advice repeats the answer's text: %s", es.Error())
	}
	if !client.HasRule(fmt.Errorf("wrapped: %w", stale), client.RuleSequenceStale) || client.StatusOf(killed) != http.StatusConflict ||
		client.RuleOf(killed) != client.RuleSequenceTerminal {
		t.Fatal("the errors.As helpers do not see through wrapping")
	}
}

// "After a 409 on a snapshot it rebuilds from current state and never
// resends the refused message."
func TestCheckpoint_After409RebuildsNeverResends(t *testing.T) {
	b := newTestBus(t)
	s := newSetup(t, b.URL, b.clock)
	ctx := context.Background()
	if _, err := s.client.Publish(ctx, snapshot(t, "", "story-9", 2, "ready")); err != nil {
		t.Fatal(err)
	}
	stale := snapshot(t, "", "story-9", 1, "draft")
	_, err := s.client.Publish(ctx, stale)
	e, ok := client.AsError(err)
	if !ok || e.Status != http.StatusConflict || e.Rule != client.RuleSequenceStale || !e.Rebuild() || !client.NeedsRebuild(err) || e.Kept {
		t.Fatalf("got %v", err)
	}
	for _, want := range []string{"not resent", "rebuild a complete snapshot from current state", "new message_id"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q does not say %q", err, want)
		}
	}
	sent := len(s.rt.Bodies())
	// The refused message handed in again is not sent again.
	_, again := s.client.Publish(ctx, stale)
	ea, _ := client.AsError(again)
	if ea == nil || !ea.NotResent || ea.Attempts != 0 || ea.Rule != client.RuleSequenceStale || len(s.rt.Bodies()) != sent {
		t.Fatalf("resent: %v (%d sends)", again, len(s.rt.Bodies())-sent)
	}
	if !strings.Contains(again.Error(), "was not sent again") {
		t.Fatalf("%q does not say it was not sent", again)
	}
	// Rebuilt from current state with a new message_id: accepted.
	res, err := s.client.Publish(ctx, snapshot(t, "", "story-9", 3, "updated"))
	if err != nil || res.Status != http.StatusAccepted {
		t.Fatalf("rebuilt: %+v %v", res, err)
	}
	// A terminal story stays terminal: not resent either, and not a rebuild.
	if _, err := s.client.Publish(ctx, snapshot(t, "", "story-9", 4, "killed")); err != nil {
		t.Fatal(err)
	}
	_, err = s.client.Publish(ctx, snapshot(t, "", "story-9", 5, "updated"))
	if e, _ := client.AsError(err); e == nil || e.Rule != client.RuleSequenceTerminal || e.Rebuild() || e.Class() != client.ClassStoryKilled {
		t.Fatalf("terminal: %v", err)
	}
	if list, _ := s.outbox.List(); len(list) != 0 {
		t.Fatalf("refused snapshots kept: %+v", list)
	}
}

// "400, 403 and 413 alert and don't retry."
func TestCheckpoint_400_403_413AlertAndDontRetry(t *testing.T) {
	b := newTestBus(t)
	ctx := context.Background()
	big := snapshot(t, "", "story-big", 1, "draft").Bytes()
	big = append(big[:len(big)-1], []byte(`,"padding":"`+strings.Repeat("x", bus.MaxBodyBytes)+`"}`)...)
	tooLarge, err := client.NewMessage(big)
	if err != nil {
		t.Fatal(err)
	}
	notCMS, err := client.Build(client.Envelope{MessageType: "story.context", SystemID: "wire",
		Payload: map[string]any{"story_id": "s", "sequence_number": 1, "state": "draft", "headline": "h"}})
	if err != nil {
		t.Fatal(err)
	}
	badID, err := client.NewMessage([]byte(`{"som_version":"1.0","message_id":"not-a-uuid","message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"s","sequence_number":1,"state":"draft","headline":"h"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		msg    *client.Message
		status int
		rule   string
		class  client.Class
	}{
		{"400", badID, http.StatusBadRequest, "envelope.format.uuid", client.ClassInvalid},
		{"403", notCMS, http.StatusForbidden, "grant.system_id", client.ClassNotAllowed},
		{"413", tooLarge, http.StatusRequestEntityTooLarge, client.RuleMessageTooLarge, client.ClassInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t, b.URL, b.clock)
			_, err := s.client.Publish(ctx, tc.msg)
			e, ok := client.AsError(err)
			if !ok || e.Status != tc.status || e.Rule != tc.rule || e.Class() != tc.class || !client.IsRefused(err) {
				t.Fatalf("got %v", err)
			}
			if e.Attempts != 1 || len(s.rt.Bodies()) != 1 || len(s.clock.Sleeps()) != 0 {
				t.Fatalf("retried: %d attempts, sleeps %v", e.Attempts, s.clock.Sleeps())
			}
			if !e.NeedsAlert() || len(s.alerts) != 1 || s.alerts[0] != e {
				t.Fatalf("no alert: %+v", s.alerts)
			}
			if e.Kept {
				t.Fatal("a refused message was kept for a resend")
			}
		})
	}
}

// "My client retries only timeouts, 429 and 5xx, always with the same
// message_id and body, with backoff."
func TestCheckpoint_RetriesOnlyTimeouts429And5xxSameIDAndBody(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		st := newStub(t, func(n int, id string, w http.ResponseWriter, r *http.Request) {
			switch n {
			case 0: // a timeout: no answer within the attempt's deadline
				<-r.Context().Done()
			case 1: // a network error: the connection is cut
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
			case 2:
				w.Header().Set("Retry-After", "7")
				refusal(w, http.StatusTooManyRequests, client.RuleQuotaExceeded, "daily allowance used", "")
			case 3:
				w.WriteHeader(http.StatusBadGateway) // a proxy's answer, not JSON
				_, _ = w.Write([]byte("<html>bad gateway</html>"))
			case 4:
				refusal(w, http.StatusServiceUnavailable, client.RuleMessageInFlight, "in flight", "")
			case 5:
				w.WriteHeader(http.StatusGatewayTimeout)
			case 6:
				w.WriteHeader(http.StatusInternalServerError)
			default:
				accepted(w, id)
			}
		})
		s := newSetup(t, st.URL, nil, func(o *client.Options) { o.AttemptTimeout = 200 * time.Millisecond })
		m := snapshot(t, "", "story-rt", 1, "draft")
		res, err := s.client.Publish(context.Background(), m)
		if err != nil || res.Status != http.StatusAccepted || res.Attempts != 8 {
			t.Fatalf("%+v %v", res, err)
		}
		for i, body := range st.Bodies() {
			if !bytes.Equal(body, m.Bytes()) || st.IDs()[i] != m.ID() {
				t.Fatalf("attempt %d sent other bytes", i+1)
			}
		}
		sleeps := s.clock.Sleeps()
		if len(sleeps) != 7 {
			t.Fatalf("sleeps %v", sleeps)
		}
		policy := client.DefaultRetryPolicy()
		for i, d := range sleeps {
			lo, hi := policy.Backoff(i+1, 0), policy.Backoff(i+1, 1)
			if i == 2 {
				lo, hi = 7*time.Second, 7*time.Second // Retry-After, longer than the backoff
			}
			if d < lo || d > hi {
				t.Fatalf("wait %d is %s, want %s to %s", i+1, d, lo, hi)
			}
		}
		if sleeps[1] <= sleeps[0] || sleeps[4] <= sleeps[3] {
			t.Fatalf("waits do not grow: %v", sleeps)
		}
	})
	for _, status := range []int{400, 403, 404, 409, 413, 422} {
		t.Run(fmt.Sprint("never ", status), func(t *testing.T) {
			st := newStub(t, func(_ int, _ string, w http.ResponseWriter, _ *http.Request) {
				refusal(w, status, "some.rule", "retry me", "")
			})
			s := newSetup(t, st.URL, nil)
			_, err := s.client.Publish(context.Background(), snapshot(t, "", "story-n", 1, "draft"))
			if client.StatusOf(err) != status || len(st.Bodies()) != 1 || len(s.clock.Sleeps()) != 0 || client.IsKept(err) {
				t.Fatalf("%d: %v, %d sends, sleeps %v", status, err, len(st.Bodies()), s.clock.Sleeps())
			}
		})
	}
}

// "A lost answer never leads to a second message about the same change."
// The answer is lost after the bus published the message (a proxy drops
// it), or the bus stops between recording and publishing it (no answer,
// then 503 message.in_flight for 30 s); the client's retries of the same
// bytes end in one publication either way. The "Test it" row covers a
// client timeout of a few milliseconds.
func TestCheckpoint_LostAnswerNeverSecondMessage(t *testing.T) {
	ctx := context.Background()
	t.Run("answer dropped after publication", func(t *testing.T) {
		b := newTestBus(t)
		reader := newReader(t, b, "checkpoint")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go dropFirstAnswers(ln, strings.TrimPrefix(b.URL, "http://"))
		for i := range 3 {
			s := newSetup(t, "http://"+ln.Addr().String(), b.clock)
			m := snapshot(t, "", "story-once", i+1, "draft")
			res, err := s.client.Publish(ctx, m)
			if err != nil || res.Status != http.StatusOK || !res.Duplicate || res.Attempts != 2 {
				t.Fatalf("after a dropped answer: %+v %v", res, err)
			}
			if n := b.deliveries(t, m.ID()); n != 1 {
				t.Fatalf("%d deliveries", n)
			}
			reader.expectOnce(t, m.ID())
		}
	})

	t.Run("bus stopped after recording", func(t *testing.T) {
		b := newTestBus(t)
		reader := newReader(t, b, "checkpoint")
		m := snapshot(t, "", "story-stopped", 1, "draft")
		var stopped atomic.Bool
		stop := publish.Faults(func(_ context.Context, p publish.FaultPoint, id string) error {
			if p == publish.FaultAfterRecord && id == m.ID() && stopped.CompareAndSwap(false, true) {
				return publish.ErrStop
			}
			return nil
		})
		b.faults.Store(&stop)
		s := newSetup(t, b.URL, b.clock)
		res, err := s.client.Publish(ctx, m)
		if err != nil || res.Status != http.StatusAccepted {
			t.Fatalf("%+v %v", res, err)
		}
		statuses := s.rt.Statuses()
		if len(statuses) < 2 || statuses[0] != http.StatusServiceUnavailable {
			t.Fatalf("statuses %v: want 503 message.in_flight after the lost answer", statuses)
		}
		var waited time.Duration
		for _, d := range s.clock.Sleeps() {
			waited += d
		}
		if waited < publish.Lease {
			t.Fatalf("waited %s in all, under the 30 s lease: %v %v", waited, s.clock.Sleeps(), statuses)
		}
		for _, body := range s.rt.Bodies() {
			if !bytes.Equal(body, m.Bytes()) {
				t.Fatal("a retry sent other bytes")
			}
		}
		if n := b.deliveries(t, m.ID()); n != 1 {
			t.Fatalf("%d deliveries", n)
		}
		reader.expectOnce(t, m.ID())
	})
}

// dropFirstAnswers proxies connections to target, and closes the client's
// connection instead of passing on the first answer to each publish.
func dropFirstAnswers(ln net.Listener, target string) {
	var mu sync.Mutex
	dropped := map[string]bool{}
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			br := bufio.NewReader(conn)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				req.URL.Scheme, req.URL.Host, req.RequestURI = "http", target, ""
				var body bytes.Buffer
				_, _ = body.ReadFrom(req.Body)
				req.Body.Close()
				req.Body = nopCloser{bytes.NewReader(body.Bytes())}
				res, err := http.DefaultTransport.RoundTrip(req)
				if err != nil {
					return
				}
				key := req.URL.Path + body.String()
				mu.Lock()
				drop := strings.HasSuffix(req.URL.Path, "/messages") && !dropped[key]
				dropped[key] = true
				mu.Unlock()
				if drop {
					res.Body.Close()
					return // the bus answered; the producer never hears it
				}
				err = res.Write(conn)
				res.Body.Close()
				if err != nil {
					return
				}
			}
		}()
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// "Messages that exhaust their retries are kept, not dropped." Kept on
// disk, unchanged, through a restart, and delivered by a later resend.
func TestCheckpoint_ExhaustedRetriesAreKept(t *testing.T) {
	b := newTestBus(t)
	dir := t.TempDir()
	ob, err := client.OpenOutbox(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := newSetup(t, b.URL, nil, func(o *client.Options) { o.Outbox = ob })
	s.rt.sandbox(func(int, string) string { return "registry.unavailable" })
	m := snapshot(t, "", "story-kept", 1, "draft")
	_, err = s.client.Publish(context.Background(), m)
	e, ok := client.AsError(err)
	policy := client.DefaultRetryPolicy()
	if !ok || !e.Kept || e.Status != http.StatusServiceUnavailable || e.Attempts != policy.Attempts || e.Class() != client.ClassNotDelivered {
		t.Fatalf("got %v", err)
	}
	if e.UserMessage() != "Other systems haven't received the latest version yet. Retrying." {
		t.Fatalf("user message %q", e.UserMessage())
	}
	var waited time.Duration
	for _, d := range s.clock.Sleeps() {
		waited += d
	}
	if waited < client.MinRetryWindow {
		t.Fatalf("gave up after waiting %s", waited)
	}

	// A restart: a new process opens the same outbox.
	reopened, err := client.OpenOutbox(dir)
	if err != nil {
		t.Fatal(err)
	}
	list, err := reopened.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("outbox after restart: %+v %v", list, err)
	}
	kept := list[0]
	if !bytes.Equal(kept.Message, m.Bytes()) || kept.MessageID != m.ID() || kept.Attempts != policy.Attempts || kept.Status != 503 || kept.Rule != "registry.unavailable" {
		t.Fatalf("kept entry %+v", kept)
	}

	if n := b.deliveries(t, m.ID()); n != 0 {
		t.Fatalf("published %d times while the store was unavailable", n)
	}

	// The store is back: the new process's resend is answered for real.
	s2 := newSetup(t, b.URL, nil, func(o *client.Options) { o.Outbox = reopened })
	results, err := s2.client.Resend(context.Background())
	if err != nil || len(results) != 1 || results[0].Err != nil || results[0].Result.Status != http.StatusAccepted {
		t.Fatalf("resend: %+v %v", results, err)
	}
	bodies := s2.rt.Bodies()
	if len(bodies) != 1 || !bytes.Equal(bodies[0], m.Bytes()) {
		t.Fatal("the resend sent other bytes")
	}
	if n := b.deliveries(t, m.ID()); n != 1 {
		t.Fatalf("published %d times", n)
	}
	if list, _ := reopened.List(); len(list) != 0 {
		t.Fatalf("delivered message still kept: %+v", list)
	}
}

// While one of a story's messages is retried, its next messages wait;
// other stories carry on.
func TestPerStoryOrdering(t *testing.T) {
	a1, a2, b1 := uuid.NewString(), uuid.NewString(), uuid.NewString()
	bAnswered := make(chan struct{})
	var st *stub
	st = newStub(t, func(_ int, id string, w http.ResponseWriter, _ *http.Request) {
		switch id {
		case a1:
			select {
			case <-bAnswered:
			case <-time.After(20 * time.Second):
				t.Error("story B waited behind story A")
			}
			if count(st.IDs(), a1) == 1 {
				refusal(w, http.StatusServiceUnavailable, "bus.publish_failed", "not published", "")
				return
			}
			accepted(w, id)
		case b1:
			accepted(w, id)
			w.(http.Flusher).Flush()
			close(bAnswered)
		default:
			accepted(w, id)
		}
	})
	s := newSetup(t, st.URL, nil)
	ctx := context.Background()
	p1 := s.client.Send(ctx, snapshot(t, a1, "story-A", 1, "draft"))
	p2 := s.client.Send(ctx, snapshot(t, a2, "story-A", 2, "draft"))
	p3 := s.client.Send(ctx, snapshot(t, b1, "story-B", 1, "draft"))
	for _, p := range []*client.Pending{p1, p2, p3} {
		if _, err := p.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	ids := st.IDs()
	last := func(id string) int {
		n := -1
		for i, v := range ids {
			if v == id {
				n = i
			}
		}
		return n
	}
	first := func(id string) int {
		for i, v := range ids {
			if v == id {
				return i
			}
		}
		return -1
	}
	if count(ids, a1) != 2 || first(a2) < last(a1) || first(b1) > last(a1) {
		t.Fatalf("order of sends %v (a1 %s, a2 %s, b1 %s)", ids, a1, a2, b1)
	}
}

func count(ids []string, id string) int {
	n := 0
	for _, v := range ids {
		if v == id {
			n++
		}
	}
	return n
}

// A story with a message kept in the outbox holds its next messages behind
// it, on disk and in order, and sends them all once the bus is back.
func TestAKeptMessageHoldsItsStory(t *testing.T) {
	b := newTestBus(t)
	var down atomic.Bool
	down.Store(true)
	s := newSetup(t, b.URL, nil, func(o *client.Options) { o.Retry.Attempts = 3; o.Retry.Initial = 20 * time.Second })
	var ids []string // every publish's message_id, in order
	s.rt.sandbox(func(_ int, id string) string {
		ids = append(ids, id)
		if down.Load() {
			return "bus.publish_failed"
		}
		return ""
	})
	ctx := context.Background()
	first := snapshot(t, "", "story-h", 1, "draft")
	second := snapshot(t, "", "story-h", 2, "draft")
	third := snapshot(t, "", "story-h", 3, "draft")
	if _, err := s.client.Publish(ctx, first); !client.IsKept(err) {
		t.Fatalf("first: %v", err)
	}
	_, err := s.client.Publish(ctx, second)
	if !client.IsKept(err) || !errors.Is(err, client.ErrHeld) {
		t.Fatalf("second: %v", err)
	}
	if count(ids, second.ID()) != 0 {
		t.Fatal("the second message was sent ahead of the kept first")
	}
	// Another story is not held.
	down.Store(false)
	if _, err := s.client.Publish(ctx, snapshot(t, "", "story-other", 1, "draft")); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.outbox.List(); len(list) != 2 {
		t.Fatalf("outbox %+v", list)
	}
	// The story's next message sends the kept ones first, in order.
	res, err := s.client.Publish(ctx, third)
	if err != nil || res.Status != http.StatusAccepted {
		t.Fatalf("third: %+v %v", res, err)
	}
	var order []string
	for _, id := range ids {
		if (id == first.ID() || id == second.ID() || id == third.ID()) && (len(order) == 0 || order[len(order)-1] != id) {
			order = append(order, id)
		}
	}
	if len(order) != 3 || order[0] != first.ID() || order[1] != second.ID() || order[2] != third.ID() {
		t.Fatalf("order %v", order)
	}
	if list, _ := s.outbox.List(); len(list) != 0 {
		t.Fatalf("outbox %+v", list)
	}
}
