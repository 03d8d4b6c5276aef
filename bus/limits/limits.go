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
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	config "github.com/storybus/storybus/api/config/v1alpha1"
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
	// Shared keeps the workspace's counters as its keys of the bucket the
	// cluster's pooled workspaces share (store.SharedLimitsBucket), not in
	// a bucket of its own.
	Shared bool
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
	// Watch, when set, follows the store connection: a batch whose answer
	// the connection's loss took fails then, not at OpTimeout.
	Watch *store.ConnWatch
}

// Limiter checks and counts one workspace's connections.
type Limiter struct {
	kv jetstream.KeyValue
	// leader reads the bucket from its leader (confirm).
	leader    store.KVLeader
	clock     Clock
	opTimeout time.Duration
	lease     time.Duration
	log       *slog.Logger
	watch     *store.ConnWatch

	mu       sync.Mutex
	counters map[string]*counter
	// drains counts the background writes of counts under way.
	drains sync.WaitGroup
}

// BucketName returns the name of a workspace's limits bucket.
func BucketName(workspace string) string { return store.LimitsBucket(workspace) }

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
	cfg := jetstream.KeyValueConfig{
		Bucket:      BucketName(workspace),
		Description: "storybus rate limit and daily quota counters of workspace " + workspace,
		History:     1,
		TTL:         7 * 24 * time.Hour,
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
	}
	if o.Shared {
		cfg.Bucket = store.SharedLimitsBucket
		cfg.Description = "storybus rate limit and daily quota counters of the pooled workspaces"
	}
	kv, err := store.CreateOrUpdate(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
		// A bucket that has these settings is only looked up: an update
		// is a write, even to the same settings (store.OpenWorkspace).
		if kv, err := js.KeyValue(ctx, cfg.Bucket); err == nil {
			st, err := kv.Status(ctx)
			if info, ok := st.(*jetstream.KeyValueBucketStatus); ok && o.Shared {
				// The shared bucket keeps the most replicas any pool
				// asked for (store.openRecordsBucket).
				cfg.Replicas = max(cfg.Replicas, info.StreamInfo().Config.Replicas)
			}
			if err == nil && sameBucket(st, cfg) {
				return kv, nil
			}
		}
		return js.CreateOrUpdateKeyValue(ctx, cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("limits bucket of %s: %w", workspace, err)
	}
	if o.Replicas > 1 {
		// Its first reads (a token's attempts, a rate limit) are direct
		// gets, which a bucket just created may not answer yet.
		store.AwaitBucket(ctx, kv)
	}
	leader := store.NewKVLeader(js, cfg.Bucket)
	if o.Shared {
		kv, leader = store.SharedKeys(kv, workspace), leader.Shared(workspace)
	}
	return &Limiter{
		kv: kv, leader: leader,
		clock: o.Clock, opTimeout: o.OpTimeout, lease: o.Lease, log: o.Logger, watch: o.Watch,
		counters: map[string]*counter{},
	}, nil
}

// sameBucket reports whether a bucket has the settings cfg gives it.
func sameBucket(st jetstream.KeyValueStatus, cfg jetstream.KeyValueConfig) bool {
	info, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return false
	}
	c := info.StreamInfo().Config
	return c.Description == cfg.Description && st.History() == int64(cfg.History) && st.TTL() == cfg.TTL &&
		c.Storage == cfg.Storage && max(c.Replicas, 1) == max(cfg.Replicas, 1)
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

// Wait blocks until the counts being written in the background are
// written or have failed, so that a stopping process closes its store
// connection after them. A count whose write failed and waits for a retry
// is not waited for.
func (l *Limiter) Wait() { l.drains.Wait() }
