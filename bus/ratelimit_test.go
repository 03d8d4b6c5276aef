package bus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/openapitest"
	"github.com/storybus/storybus/internal/testutil"
	"github.com/storybus/storybus/rules"
)

// stoppedClock stands still until advanced, so that Retry-After can be
// asserted to the second.
type stoppedClock struct{ ns atomic.Int64 }

func newStoppedClock(t time.Time) *stoppedClock {
	c := &stoppedClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *stoppedClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *stoppedClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func startNATS(t testing.TB) *server.Server {
	t.Helper()
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

func connectStore(t testing.TB, ns *server.Server) *store.Store {
	t.Helper()
	st, err := store.Connect(store.Options{Embedded: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// limitedWorkspace is the newsroom workspace with limits on its cms and
// wire connections (nil: none).
func limitedWorkspace(cms, wire *config.Limits) *config.Workspace {
	w := workspaceConfig("newsroom")
	w.Connections[0].Limits = cms
	w.Connections[1].Limits = wire
	return w
}

// newReplica starts one bus process's worth on ns: its own connection to
// the store, its own server and HTTP listener, serving cfg.
func newReplica(t *testing.T, ns *server.Server, clock publish.Clock, cfg *config.Workspace, faults publish.Faults) *harness {
	t.Helper()
	return newReplicaWith(t, ns, bus.Options{Clock: clock, Faults: faults}, cfg)
}

// newReplicaWith is newReplica with more of the server's options.
func newReplicaWith(t *testing.T, ns *server.Server, o bus.Options, cfg *config.Workspace) *harness {
	t.Helper()
	o.Store, o.RequestTimeout = connectStore(t, ns), 5*time.Second
	srv := bus.New(o)
	if err := srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ns: ns, srv: srv}
	h.http, h.api = openapitest.Serve(t, openapitest.PublishPort, srv.Handler())
	return h
}

// usageReader reads a workspace's limit counters straight from the store.
func usageReader(t *testing.T, ns *server.Server, clock limits.Clock) func(connection string) limits.Usage {
	t.Helper()
	l, err := limits.Open(context.Background(), connectStore(t, ns).JS, "newsroom", limits.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return func(connection string) limits.Usage {
		t.Helper()
		u, err := l.Usage(context.Background(), connection)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
}

func expectRetryAfter(t *testing.T, a answer, want int) {
	t.Helper()
	if got := a.Header.Get("Retry-After"); got != strconv.Itoa(want) {
		t.Fatalf("Retry-After %q, want %d (%s)", got, want, a.Raw)
	}
}

func TestRateLimitBurstThenRetryAfter(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	h := newReplica(t, ns, clock, limitedWorkspace(&config.Limits{RatePerSecond: 0.5, Burst: 3}, nil), nil)
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	wire := h.token(t, "newsroom", "wire", wireSecret)

	for i := range 3 {
		expect(t, h.post(t, "newsroom", cms, snapshot("", fmt.Sprint("burst-", i), 1, "cms")), http.StatusAccepted, "")
	}
	a := h.post(t, "newsroom", cms, snapshot("", "over", 1, "cms"))
	expect(t, a, http.StatusTooManyRequests, rules.RateLimited)
	expectRetryAfter(t, a, 2) // one token every 2 s
	// Refused requests use no token, and any request counts, even one
	// that a later stage would refuse.
	expect(t, h.post(t, "newsroom", cms, []byte("not json")), http.StatusTooManyRequests, rules.RateLimited)

	clock.Advance(time.Second)
	a = h.post(t, "newsroom", cms, snapshot("", "over", 1, "cms"))
	expect(t, a, http.StatusTooManyRequests, rules.RateLimited)
	expectRetryAfter(t, a, 1)
	clock.Advance(time.Second)
	expect(t, h.post(t, "newsroom", cms, snapshot("", "over", 1, "cms")), http.StatusAccepted, "")
	expect(t, h.post(t, "newsroom", cms, snapshot("", "again", 1, "cms")), http.StatusTooManyRequests, rules.RateLimited)
	clock.Advance(time.Minute) // idle: the burst is whole again, no more
	for i := range 3 {
		expect(t, h.post(t, "newsroom", cms, snapshot("", fmt.Sprint("refilled-", i), 1, "cms")), http.StatusAccepted, "")
	}
	expect(t, h.post(t, "newsroom", cms, snapshot("", "again", 1, "cms")), http.StatusTooManyRequests, rules.RateLimited)

	// A connection without limits is unaffected and costs no counter.
	for i := range 20 {
		expect(t, h.post(t, "newsroom", wire, snapshot("", fmt.Sprint("wire-", i), 1, "wire")), http.StatusAccepted, "")
	}
	usage := usageReader(t, ns, clock)
	if u := usage("wire"); u.Stored {
		t.Fatalf("a connection without limits has counters: %+v", u)
	}
	if u := usage("cms"); !u.Stored || u.Full.IsZero() {
		t.Fatalf("cms counters %+v", u)
	}
}

func TestQuotaPerUTCDay(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 21, 15, 30, 0, time.UTC))
	h := newReplica(t, ns, clock, limitedWorkspace(&config.Limits{DailyQuota: 3}, nil), nil)
	cms := h.token(t, "newsroom", "cms", cmsSecret)

	for i := range 3 {
		expect(t, h.post(t, "newsroom", cms, snapshot("", fmt.Sprint("day1-", i), 1, "cms")), http.StatusAccepted, "")
	}
	a := h.post(t, "newsroom", cms, snapshot("", "day1-over", 1, "cms"))
	expect(t, a, http.StatusTooManyRequests, rules.QuotaExceeded)
	expectRetryAfter(t, a, 2*3600+44*60+30) // until 2026-11-30T00:00:00Z

	clock.Advance(2*time.Hour + 44*time.Minute + 29*time.Second)
	a = h.post(t, "newsroom", h.token(t, "newsroom", "cms", cmsSecret), snapshot("", "day1-over", 1, "cms"))
	expect(t, a, http.StatusTooManyRequests, rules.QuotaExceeded)
	expectRetryAfter(t, a, 1)

	clock.Advance(time.Second) // midnight UTC
	cms = h.token(t, "newsroom", "cms", cmsSecret)
	for i := range 3 {
		expect(t, h.post(t, "newsroom", cms, snapshot("", fmt.Sprint("day2-", i), 1, "cms")), http.StatusAccepted, "")
	}
	a = h.post(t, "newsroom", cms, snapshot("", "day2-over", 1, "cms"))
	expect(t, a, http.StatusTooManyRequests, rules.QuotaExceeded)
	expectRetryAfter(t, a, 24*3600)
	if u := usageReader(t, ns, clock)("cms"); u.Day != "2026-11-30" || u.Accepted != 3 || u.InFlight != 0 {
		t.Fatalf("usage %+v", u)
	}
}

func TestQuotaCountsOnlyAcceptedMessages(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	h := newReplica(t, ns, clock, limitedWorkspace(&config.Limits{DailyQuota: 3}, nil), nil)
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	usage := usageReader(t, ns, clock)

	first := snapshot("", "counted", 1, "cms")
	expect(t, h.post(t, "newsroom", cms, first), http.StatusAccepted, "")
	// None of these is accepted, so none counts: a duplicate, a refusal
	// at each later stage, and one of stage 10's refusals.
	var m map[string]any
	_ = json.Unmarshal(first, &m)
	m["payload"].(map[string]any)["headline"] = "changed"
	reused, _ := json.Marshal(m)
	for _, tc := range []struct {
		body   []byte
		status int
		rule   string
	}{
		{first, http.StatusOK, ""},
		{[]byte(`{"not":"som"`), http.StatusBadRequest, rules.MessageNotJSON},
		{snapshot("not-a-uuid", "x", 1, "cms"), http.StatusBadRequest, "envelope.format.uuid"},
		{snapshot("", "x", 1, "wire"), http.StatusForbidden, rules.GrantSystemID},
		{reused, http.StatusConflict, rules.MessageIDReused},
		{snapshot("", "counted", 1, "cms"), http.StatusConflict, rules.SequenceStale},
	} {
		a := h.post(t, "newsroom", cms, tc.body)
		if a.Status != tc.status || (tc.rule != "" && a.rule() != tc.rule) {
			t.Fatalf("got %d %s, want %d %s", a.Status, a.Raw, tc.status, tc.rule)
		}
	}
	// Their slots are freed as their requests end.
	eventually(t, "refused requests free their quota slots", func() bool { return usage("cms").InFlight == 0 })
	if u := usage("cms"); u.Accepted != 1 {
		t.Fatalf("accepted %d, want 1", u.Accepted)
	}
	expect(t, h.post(t, "newsroom", cms, snapshot("", "counted-2", 1, "cms")), http.StatusAccepted, "")
	expect(t, h.post(t, "newsroom", cms, snapshot("", "counted-3", 1, "cms")), http.StatusAccepted, "")
	expect(t, h.post(t, "newsroom", cms, snapshot("", "counted-4", 1, "cms")), http.StatusTooManyRequests, rules.QuotaExceeded)
	// A duplicate of an accepted message is refused too once the quota is
	// used up: stage 6 comes before idempotency.
	expect(t, h.post(t, "newsroom", cms, first), http.StatusTooManyRequests, rules.QuotaExceeded)
}

func TestQuotaHeldByMessagesInFlight(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	held := uuid.NewString()
	reached, proceed := make(chan struct{}), make(chan struct{})
	faults := func(ctx context.Context, p publish.FaultPoint, id string) error {
		if p == publish.FaultBeforePublish && id == held {
			close(reached)
			select {
			case <-proceed:
			case <-ctx.Done():
			}
		}
		return nil
	}
	h := newReplica(t, ns, clock, limitedWorkspace(&config.Limits{DailyQuota: 1}, nil), faults)
	cms := h.token(t, "newsroom", "cms", cmsSecret)

	done := make(chan int)
	go func() {
		res, err := post(h.http.URL, cms, snapshot(held, "slow", 1, "cms"))
		if err != nil {
			done <- 0
			return
		}
		done <- res.status
	}()
	<-reached
	a := h.post(t, "newsroom", cms, snapshot("", "fast", 1, "cms"))
	expect(t, a, http.StatusTooManyRequests, rules.QuotaExceeded)
	expectRetryAfter(t, a, 1) // the message in flight may yet be refused
	close(proceed)
	if got := <-done; got != http.StatusAccepted {
		t.Fatalf("the held message got %d", got)
	}
	a = h.post(t, "newsroom", cms, snapshot("", "fast", 1, "cms"))
	expect(t, a, http.StatusTooManyRequests, rules.QuotaExceeded)
	expectRetryAfter(t, a, 15*3600)
}

func TestLimitCountersUnavailable(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Now())
	cfg := func() *config.Workspace {
		return limitedWorkspace(&config.Limits{RatePerSecond: 100, Burst: 100, DailyQuota: 100}, nil)
	}
	// One replica has its counters open, the other opens them on its
	// first limited request.
	warm, cold := newReplica(t, ns, clock, cfg(), nil), newReplica(t, ns, clock, cfg(), nil)
	cms := warm.token(t, "newsroom", "cms", cmsSecret)
	expect(t, warm.post(t, "newsroom", cms, snapshot("", "s", 1, "cms")), http.StatusAccepted, "")
	ns.Shutdown()
	ns.WaitForShutdown()
	for _, h := range []*harness{warm, cold} {
		start := time.Now()
		// Not JSON: only stage 6 can answer 503 before stage 7 refuses it.
		a := h.post(t, "newsroom", cms, []byte("not json"))
		expect(t, a, http.StatusServiceUnavailable, rules.RegistryUnavailable)
		expectRetryAfter(t, a, 1)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("answered after %s", d)
		}
	}
}

// TestLimitsHoldAcrossReplicas runs two bus processes' worth on one
// JetStream: producers hammer both at once, and together they accept
// exactly the quota and exactly the burst.
func TestLimitsHoldAcrossReplicas(t *testing.T) {
	const quota, burst, producers, each = 60, 40, 8, 20
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	cfg := func() *config.Workspace {
		return limitedWorkspace(&config.Limits{DailyQuota: quota}, &config.Limits{RatePerSecond: 0.001, Burst: burst})
	}
	replicas := []*harness{newReplica(t, ns, clock, cfg(), nil), newReplica(t, ns, clock, cfg(), nil)}
	conns := []struct{ name, secret, rule string }{
		{"cms", cmsSecret, rules.QuotaExceeded},
		{"wire", wireSecret, rules.RateLimited},
	}
	var accepted [2][2]atomic.Int64 // by replica, connection
	start := make(chan struct{})
	var wg sync.WaitGroup
	for r, h := range replicas {
		for c, conn := range conns {
			tok := h.token(t, "newsroom", conn.name, conn.secret)
			for p := range producers {
				wg.Go(func() {
					<-start
					for i := range each {
						story := fmt.Sprintf("r%d-%s-%d-%d", r, conn.name, p, i)
						res, err := post(h.http.URL, tok, snapshot("", story, 1, conn.name))
						switch {
						case err != nil:
							t.Error(err)
							return
						case res.status == http.StatusAccepted:
							accepted[r][c].Add(1)
						case res.status != http.StatusTooManyRequests || res.rule != conn.rule || res.retryAfter == "":
							t.Errorf("%s on replica %d: %d %s Retry-After %q", conn.name, r, res.status, res.rule, res.retryAfter)
							return
						}
					}
				})
			}
		}
	}
	close(start)
	wg.Wait()
	for c, want := range []int64{quota, burst} {
		a, b := accepted[0][c].Load(), accepted[1][c].Load()
		t.Logf("%s: replica 0 accepted %d, replica 1 accepted %d", conns[c].name, a, b)
		if a+b != want || a == 0 || b == 0 {
			t.Errorf("%s: accepted %d + %d, want %d in all, some on each replica", conns[c].name, a, b, want)
		}
	}
	usage := usageReader(t, ns, clock)
	eventually(t, "every quota slot settled", func() bool { return usage("cms").InFlight == 0 })
	if u := usage("cms"); u.Accepted != quota {
		t.Fatalf("the store counts %d accepted, want %d", u.Accepted, quota)
	}
}

// postResult is an answer reduced to what concurrent producers check.
type postResult struct {
	status     int
	rule       string
	retryAfter string
}

// post publishes without failing the test, for use off the test goroutine.
func post(base, token string, body []byte) (postResult, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/tenants/newsroom/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return postResult{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return postResult{}, err
	}
	var ans struct {
		Violations []rules.Violation `json:"violations"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return postResult{}, fmt.Errorf("answer %d: %s", res.StatusCode, b)
	}
	out := postResult{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After")}
	if len(ans.Violations) > 0 {
		out.rule = ans.Violations[0].Rule
	}
	return out, nil
}

// BenchmarkLimitCheck measures one limit check against embedded
// JetStream: a rate limit alone, a daily quota with its count, and many
// requests of one connection at once (decided in batches).
func BenchmarkLimitCheck(b *testing.B) {
	ns := startNATS(b)
	l, err := limits.Open(context.Background(), connectStore(b, ns).JS, "bench", limits.Options{})
	if err != nil {
		b.Fatal(err)
	}
	check := func(b *testing.B, conn string, lim config.Limits) {
		d, err := l.Admit(conn, lim)
		if err != nil || d.Verdict != limits.Admitted {
			b.Errorf("%+v %v", d, err) // not Fatal: RunParallel's goroutines call it too
			return
		}
		if d.Reservation != nil {
			d.Reservation.Accept()
		}
	}
	b.Run("rate", func(b *testing.B) {
		lim := config.Limits{RatePerSecond: 1e9, Burst: 1e9}
		for b.Loop() {
			check(b, "rate", lim)
		}
	})
	b.Run("quota", func(b *testing.B) {
		lim := config.Limits{RatePerSecond: 1e9, Burst: 1e9, DailyQuota: 1 << 40}
		for b.Loop() {
			check(b, "quota", lim)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		lim := config.Limits{RatePerSecond: 1e9, Burst: 1e9, DailyQuota: 1 << 40}
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				check(b, "parallel", lim)
			}
		})
	})
}

// eventually polls cond until it holds, for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.EventuallyTrue(t, what, 10*time.Second, cond)
}

// TestWaitWritesTheCountsBeforeAStop: a stopping bus waits for the daily
// quota counts still being written in the background, so that it closes
// its store connection after them and loses none.
func TestWaitWritesTheCountsBeforeAStop(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	h := newReplica(t, ns, clock, limitedWorkspace(&config.Limits{DailyQuota: 1000}, nil), nil)
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	usage := usageReader(t, ns, clock)
	const n = 20
	for i := range n {
		expect(t, h.post(t, "newsroom", cms, snapshot("", fmt.Sprintf("waited-%d", i), 1, "cms")), http.StatusAccepted, "")
	}
	h.srv.Wait()
	if u := usage("cms"); u.Accepted != n || u.InFlight != 0 {
		t.Fatalf("after Wait: %d accepted, %d in flight; want %d and 0", u.Accepted, u.InFlight, n)
	}
}

// TestApplyOpensTheLimitsBucket: a workspace's limits bucket is there once
// the workspace is applied, before any request needs it, replicated like
// its topic.
func TestApplyOpensTheLimitsBucket(t *testing.T) {
	ns := startNATS(t)
	js := connectStore(t, ns).JS
	if _, err := js.KeyValue(context.Background(), limits.BucketName("newsroom")); err == nil {
		t.Fatal("the limits bucket exists before the workspace is applied")
	}
	newReplicaWith(t, ns, bus.Options{}, workspaceConfig("newsroom"))
	if _, err := js.KeyValue(context.Background(), limits.BucketName("newsroom")); err != nil {
		t.Fatalf("no limits bucket after Apply: %v", err)
	}
	bucket, err := js.Stream(context.Background(), "KV_"+limits.BucketName("newsroom"))
	if err != nil {
		t.Fatal(err)
	}
	topic, err := js.Stream(context.Background(), store.StreamName("newsroom"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bucket.CachedInfo().Config.Replicas, topic.CachedInfo().Config.Replicas; got != want {
		t.Errorf("the limits bucket has %d replicas, the topic %d", got, want)
	}
}
