// Package limits enforces connections' rate limits and daily quotas (stage
// 6 of the publish pipeline), and the token endpoint's limit on failed
// credential attempts, with counters kept in JetStream, so that every
// replica of a workspace shares them: a limit holds for the workspace, not
// per bus process.
//
// Each workspace has a key-value bucket, limits-<workspace>, with one key
// per connection (c.<connection>), one per client id and one per source
// address that failed to authenticate (a.client.<id>, a.addr.<address>;
// see AttemptFailed). A connection's value holds the rate limit's theoretical arrival
// time (GCRA, a token bucket kept as one timestamp) and the quota's count
// of accepted messages for the current UTC day, with the slots reserved by
// requests still in flight. Every change is a compare-and-swap on the
// key's revision, so replicas never overwrite each other's counts.
//
// Within a process, the checks and counts of one connection go through
// one queue: whatever arrived while a store operation was under way is
// decided together, in arrival order, and written with a single
// compare-and-swap. Concurrency then costs fewer writes instead of
// conflicts, and a batch decides exactly what the same requests would
// have decided one at a time.
package limits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/config"
	"github.com/storybus/storybus/bus/store"
)

// Clock tells the time limits are measured against; tests inject one to
// cross a second or a UTC midnight without sleeping.
type Clock interface{ Now() time.Time }

// Verdict is what a limit check decided.
type Verdict int

const (
	// Admitted: the request may go on.
	Admitted Verdict = iota
	// RateLimited: the connection is over its request rate.
	RateLimited
	// QuotaExceeded: the connection's accepted messages today, with those
	// still in flight, reached its daily quota.
	QuotaExceeded
)

// Decision is the outcome of a limit check.
type Decision struct {
	Verdict Verdict
	// RetryAfter, for a refusal, is how long until the request could be
	// admitted: until a token is available, until the next UTC midnight,
	// or a second when only requests in flight hold the rest of the quota.
	RetryAfter time.Duration
	// InFlight is set on a QuotaExceeded that requests still in flight
	// cause: they may yet be refused and free their slots.
	InFlight bool
	// Reservation, set when the connection has a daily quota and the
	// request was admitted, holds its slot until Accept or Release.
	Reservation *Reservation
}

// Usage is a connection's counters as the store holds them.
type Usage struct {
	// Day is the UTC day Accepted counts (2006-01-02), empty before any
	// message was counted.
	Day string
	// Accepted is the number of messages accepted on Day.
	Accepted int64
	// InFlight is the number of quota slots held by requests in flight.
	InFlight int64
	// Full is when the rate limit's burst is whole again; zero without
	// rate limit history.
	Full time.Time
	// Stored reports whether the connection has counters at all.
	Stored bool
}

// Options configure a Limiter.
type Options struct {
	// Clock is the time limits are measured against; default the wall clock.
	Clock Clock
	// Replicas of the bucket: 1 on an embedded server, 3 on a cluster.
	Replicas int
	// OpTimeout bounds one batch of store operations, retries included;
	// default 2s. A check waits at most two batches.
	OpTimeout time.Duration
	// Lease is the longest a quota slot stays reserved for a request that
	// never settles it (a stopped process); it must exceed the longest a
	// request can take, with room for clock differences between replicas.
	// Default 70s.
	Lease time.Duration
	// Logger receives counts that could not be written yet.
	Logger *slog.Logger
}

// maxAttempts bounds the compare-and-swap attempts of one batch.
const maxAttempts = 16

// Limiter checks and counts one workspace's connections.
type Limiter struct {
	kv        jetstream.KeyValue
	clock     Clock
	opTimeout time.Duration
	lease     time.Duration
	log       *slog.Logger

	mu       sync.Mutex
	counters map[string]*counter
	// drains counts the background writes of counts under way.
	drains sync.WaitGroup
}

// BucketName returns the name of a workspace's limits bucket.
func BucketName(workspace string) string { return "limits-" + workspace }

// Key returns a connection's key in its workspace's limits bucket.
func Key(connection string) string { return "c." + store.EncodeToken(connection) }

// wallClock is the wall clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Open creates or updates the workspace's limits bucket and returns its
// limiter. A counter that has not changed for 7 days is dropped: by then its
// day is over, and its rate limit has refilled unless a full burst takes
// longer than that to refill.
func Open(ctx context.Context, js jetstream.JetStream, workspace string, o Options) (*Limiter, error) {
	if o.Clock == nil {
		o.Clock = wallClock{}
	}
	if o.Replicas < 1 {
		o.Replicas = 1
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 2 * time.Second
	}
	if o.Lease <= 0 {
		o.Lease = 70 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      BucketName(workspace),
		Description: "storybus rate limit and daily quota counters of workspace " + workspace,
		History:     1,
		TTL:         7 * 24 * time.Hour,
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("limits bucket of %s: %w", workspace, err)
	}
	return &Limiter{
		kv: kv, clock: o.Clock, opTimeout: o.OpTimeout, lease: o.Lease, log: o.Logger,
		counters: map[string]*counter{},
	}, nil
}

// Admit checks a request of the connection against its limits: first the
// rate limit (a request it admits uses a token), then the daily quota (a
// request it admits holds a slot, in Decision.Reservation). With no limits
// it admits at once and touches nothing. It waits at most two batches of
// store operations (twice Options.OpTimeout), so it takes no context: an
// error means the store could not be reached in that time.
func (l *Limiter) Admit(connection string, lim config.Limits) (Decision, error) {
	if lim.RatePerSecond <= 0 && lim.DailyQuota <= 0 {
		return Decision{}, nil
	}
	c := l.counter(connection)
	o := &op{admit: true, limits: lim, ready: make(chan struct{})}
	l.run(c, o)
	if o.err != nil {
		return Decision{}, o.err
	}
	d := o.decision
	if o.until > 0 {
		d.Reservation = &Reservation{l: l, c: c, until: o.until}
	}
	return d, nil
}

// Usage reads the connection's counters from the store, as of now.
func (l *Limiter) Usage(ctx context.Context, connection string) (Usage, error) {
	st, rev, err := l.load(ctx, Key(connection))
	if err != nil {
		return Usage{}, err
	}
	st.roll(l.clock.Now())
	u := Usage{Day: st.Day, Accepted: st.Accepted, InFlight: st.inFlight(), Stored: rev > 0}
	if st.TAT > 0 {
		u.Full = time.Unix(0, st.TAT)
	}
	return u, nil
}

// Reservation is a slot of a connection's daily quota, held from the limit
// check until the request ends. Exactly one of Accept and Release takes
// effect; calling either again, or both, is safe.
type Reservation struct {
	l     *Limiter
	c     *counter
	until int64
	state atomic.Int32
}

// Reservation states.
const (
	held int32 = iota
	accepted
	released
	acceptedLate
)

// Accept counts the request's message as accepted today. The count is
// queued before Accept returns, so a later check in this process sees it,
// and written in the background, retried until it lands.
func (r *Reservation) Accept() {
	day := utcDay(r.l.clock.Now())
	switch {
	case r.state.CompareAndSwap(held, accepted):
		r.l.settle(r.c, &op{until: r.until, accepted: true, day: day})
	case r.state.CompareAndSwap(released, acceptedLate):
		// Released already (the client went away while its message was
		// published): count it, its slot is gone.
		r.l.settle(r.c, &op{accepted: true, day: day})
	}
}

// Release frees the slot of a request that ended without its message
// being accepted.
func (r *Reservation) Release() {
	if r.state.CompareAndSwap(held, released) {
		r.l.settle(r.c, &op{until: r.until})
	}
}

// counter is one connection's queue of checks and counts, and the last
// state of its key this process read or wrote.
type counter struct {
	key string

	mu      sync.Mutex
	queue   []*op
	busy    bool // a leader is processing the queue
	backoff time.Duration

	// Owned by the leader.
	st    state
	rev   uint64
	known bool
}

// op is one check (admit) or one count (a settled reservation).
type op struct {
	admit  bool
	limits config.Limits
	// ready is closed when an admit has its decision, or must lead.
	ready    chan struct{}
	lead     bool
	decision Decision
	err      error

	// until is the reservation's hold: set by an admit, read by a settle.
	until    int64
	accepted bool
	day      string
}

func (l *Limiter) counter(connection string) *counter {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.counters[connection]
	if !ok {
		c = &counter{key: Key(connection)}
		l.counters[connection] = c
	}
	return c
}

// run queues an admit and waits for its decision. The first op to find
// the counter idle leads: it processes the queue, then hands the lead to
// the next waiting admit, so no request waits for more than the batch
// under way and its own.
func (l *Limiter) run(c *counter, o *op) {
	c.mu.Lock()
	c.queue = append(c.queue, o)
	if c.busy {
		c.mu.Unlock()
		<-o.ready
		if !o.lead {
			return
		}
	} else {
		c.busy = true
		c.mu.Unlock()
	}
	l.handOff(c, l.process(c))
}

// settle queues a count and returns; it is written in the background.
func (l *Limiter) settle(c *counter, o *op) {
	c.mu.Lock()
	c.queue = append(c.queue, o)
	if c.busy {
		c.mu.Unlock()
		return
	}
	c.busy = true
	c.mu.Unlock()
	l.drains.Add(1)
	go l.drain(c)
}

// drain writes a counter's queue in the background.
func (l *Limiter) drain(c *counter) {
	defer l.drains.Done()
	l.handOff(c, l.process(c))
}

// Wait blocks until the counts being written in the background are
// written or have failed, so that a stopping process closes its store
// connection after them. A count whose write failed and waits for a retry
// is not waited for.
func (l *Limiter) Wait() { l.drains.Wait() }

// handOff passes the lead on after a batch: to a waiting admit, or to a
// background drain for counts only, after a backoff when the store failed.
func (l *Limiter) handOff(c *counter, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !failed {
		c.backoff = 0
	}
	if len(c.queue) == 0 {
		c.busy = false
		return
	}
	for _, o := range c.queue {
		if o.admit {
			o.lead = true
			close(o.ready)
			return
		}
	}
	if !failed {
		l.drains.Add(1)
		go l.drain(c)
		return
	}
	// Only counts are left and the store failed: retry them later, or
	// with the next check, whichever comes first.
	c.busy = false
	c.backoff = min(max(2*c.backoff, 100*time.Millisecond), 5*time.Second)
	time.AfterFunc(c.backoff, func() {
		c.mu.Lock()
		if c.busy || len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		c.busy = true
		c.mu.Unlock()
		l.drains.Add(1)
		l.drain(c)
	})
}

// process decides and writes one batch: everything queued now. Counts
// apply first, then checks in arrival order, against the key's latest
// state, in one compare-and-swap, retried against the new state when
// another replica wrote first. It reports whether the store failed.
func (l *Limiter) process(c *counter) (failed bool) {
	c.mu.Lock()
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()
	var settles, admits []*op
	for _, o := range batch {
		if o.admit {
			admits = append(admits, o)
		} else {
			settles = append(settles, o)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.opTimeout)
	defer cancel()

	var err error
	ambiguous := false // a write failed without saying whether it landed
	for range maxAttempts {
		fresh := false
		if !c.known {
			if c.st, c.rev, err = l.load(ctx, c.key); err != nil {
				break
			}
			c.known, fresh = true, true
		}
		now := l.clock.Now()
		next := c.st.clone()
		changed := next.roll(now)
		for _, o := range settles {
			next.settle(o.until, o.accepted, o.day)
			changed = true
		}
		heldOnly := false
		for _, o := range admits {
			var used bool
			o.decision, o.until, used = decide(&next, now, o.limits, l.lease)
			changed = changed || used
			heldOnly = heldOnly || o.decision.InFlight
		}
		// Refusing for holds needs the holds as they are now: another
		// replica may have settled them since this process last looked.
		// Other refusals may stand on an older state: under the same
		// limits the arrival time and the day's count only grow, so the
		// current state refuses too.
		if heldOnly && !fresh {
			c.known = false
			continue
		}
		if !changed {
			l.deliver(admits)
			return false
		}
		var rev uint64
		if rev, err = l.write(ctx, c, next); err == nil {
			c.st, c.rev = next, rev
			l.deliver(admits)
			return false
		}
		c.known = false
		if !store.IsConflict(err) {
			ambiguous = store.MayHaveLanded(err)
			break
		}
	}
	if err == nil {
		err = errors.New("limits: too many concurrent writers")
	}
	for _, o := range admits {
		o.decision, o.until, o.err = Decision{}, 0, err
	}
	l.deliver(admits)
	l.requeue(c, settles, ambiguous, err)
	return true
}

// decide applies one check to the state and reports whether it changed
// it (used a token or a slot), which must then be written.
func decide(s *state, now time.Time, lim config.Limits, lease time.Duration) (d Decision, until int64, used bool) {
	if lim.RatePerSecond > 0 {
		before := s.TAT
		ok, wait := s.admitRate(now, lim.RatePerSecond, lim.Burst)
		used = s.TAT != before
		if !ok {
			return Decision{Verdict: RateLimited, RetryAfter: wait}, 0, used
		}
	}
	if lim.DailyQuota <= 0 {
		return Decision{}, 0, used
	}
	until, wait, heldOnly := s.reserve(now, lim.DailyQuota, lease)
	if until == 0 {
		return Decision{Verdict: QuotaExceeded, RetryAfter: wait, InFlight: heldOnly}, 0, used
	}
	return Decision{}, until, true
}

func (l *Limiter) deliver(admits []*op) {
	for _, o := range admits {
		if !o.lead { // a leader's ready was closed to make it lead
			close(o.ready)
		}
	}
}

// requeue puts back the counts of a failed batch, to be retried. Whether a
// write that failed without an answer landed is unknown: an accepted
// message is counted again (at worst twice, which only refuses sooner), a
// released slot is left to lapse (never freed twice). A count whose day is
// over, and a release whose hold has lapsed, no longer matter.
func (l *Limiter) requeue(c *counter, settles []*op, ambiguous bool, err error) {
	now := l.clock.Now()
	today, sec := utcDay(now), now.Unix()
	var keep []*op
	for _, o := range settles {
		switch {
		case o.accepted && o.day < today && o.until <= sec:
		case !o.accepted && (ambiguous || o.until <= sec):
		default:
			keep = append(keep, o)
		}
	}
	if errors.Is(err, nats.ErrConnectionClosed) {
		// The store connection was closed for good: the process is
		// stopping, and these counts are lost with it.
		if len(keep) > 0 {
			l.log.Warn("limit counts dropped: the store connection is closed", "key", c.key, "counts", len(keep))
		}
		keep = nil
	} else if len(keep) > 0 {
		l.log.Warn("limit counts not written yet; retrying", "key", c.key, "counts", len(keep), "error", err)
	}
	c.mu.Lock()
	c.queue = append(keep, c.queue...)
	c.mu.Unlock()
}

// load reads a key's state and revision; a missing key is the zero state
// at revision 0.
func (l *Limiter) load(ctx context.Context, key string) (state, uint64, error) {
	return get[state](ctx, l.kv, key)
}

// write stores the state if the key is still at the revision last seen.
func (l *Limiter) write(ctx context.Context, c *counter, st state) (uint64, error) {
	return l.put(ctx, c.key, st, c.rev)
}

// get reads a key's JSON value and revision: the zero value at revision 0
// when the key holds nothing. An unreadable value is the zero value, to be
// replaced, never trusted.
func get[T any](ctx context.Context, kv jetstream.KeyValue, key string) (T, uint64, error) {
	var v T
	e, err := kv.Get(ctx, key)
	switch {
	case isMissing(err):
		return v, 0, nil
	case err != nil:
		return v, 0, err
	}
	if json.Unmarshal(e.Value(), &v) != nil {
		var zero T
		return zero, e.Revision(), nil
	}
	return v, e.Revision(), nil
}

// put writes v as a key's JSON value if the key is still at revision rev
// (0: holds nothing), a compare-and-swap.
func (l *Limiter) put(ctx context.Context, key string, v any, rev uint64) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return l.kv.Create(ctx, key, b)
	}
	return l.kv.Update(ctx, key, b, rev)
}

// isMissing reports a key that holds nothing: never written, or deleted.
func isMissing(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
}

// isConflict reports a compare-and-swap that lost to another writer.
func isConflict(err error) bool { return store.IsConflict(err) }
