package bus

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/bus/rules"
	"github.com/storybus/storybus/bus/store"
)

// ctxReservation is the gin context key of the request's quota slot.
const ctxReservation = "storybus.quotaReservation"

// limit is stage 6: the connection's rate limit and daily quota, counted
// in the workspace's limits bucket so that they hold across every replica
// (package limits). A connection without limits costs nothing here.
//
// A request admitted under a daily quota holds a slot of it until the
// request ends: countAccepted counts it when the message is accepted, and
// the end of any other request frees it, so only accepted messages count.
func (s *Server) limit(r *request) []rules.Violation {
	lim := r.limits
	if r.rateOnly {
		lim.DailyQuota = 0
	}
	if lim.RatePerSecond <= 0 && lim.DailyQuota <= 0 {
		return nil
	}
	l, err := s.limiter(r.ws)
	var d limits.Decision
	if err == nil {
		d, err = l.Admit(r.conn.Name, lim)
	}
	if err != nil {
		s.log.ErrorContext(r.c.Request.Context(), "limit counters unavailable", "workspace", r.ws.id, "connection", r.conn.Name, "error", err)
		r.retry = time.Second
		return one(rules.New(rules.RegistryUnavailable, "the limit counters are unreachable; retry with the same message_id and body", ""))
	}
	r.retry = d.RetryAfter
	switch d.Verdict {
	case limits.RateLimited:
		return one(rules.New(rules.RateLimited, fmt.Sprintf(
			"the connection is over its rate limit of %s requests/s (burst %d); retry after Retry-After",
			strconv.FormatFloat(lim.RatePerSecond, 'f', -1, 64), max(lim.Burst, 1)), ""))
	case limits.QuotaExceeded:
		if d.InFlight {
			return one(rules.New(rules.QuotaExceeded, fmt.Sprintf(
				"the rest of the connection's daily quota of %d messages is held by messages still being published; retry after Retry-After", lim.DailyQuota), ""))
		}
		return one(rules.New(rules.QuotaExceeded, fmt.Sprintf(
			"the connection has used its daily quota of %d accepted messages (UTC day); retry after Retry-After, the next UTC midnight", lim.DailyQuota), ""))
	}
	if res := d.Reservation; res != nil {
		r.c.Set(ctxReservation, res)
		// The request's context ends when its handler returns (or its
		// client goes away); a slot not counted by then is freed.
		context.AfterFunc(r.c.Request.Context(), res.Release)
	}
	return nil
}

// countAccepted counts an accepted message (202) against its connection's
// daily quota. The count is queued before the answer is written and
// stored in the background.
func (s *Server) countAccepted(r *request) {
	if v, ok := r.c.Get(ctxReservation); ok {
		v.(*limits.Reservation).Accept()
	}
}

// limiterSlot is a workspace's limiter, opened on the first request that
// needs it.
type limiterSlot struct {
	mu sync.Mutex
	l  atomic.Pointer[limits.Limiter]
	// failed is when opening last failed, and err why: requests within a
	// second of a failure share it instead of waiting in turn.
	failed time.Time
	err    error
}

// limiter returns the workspace's limiter, opening its bucket on first
// use; a failure is retried by the next request.
func (s *Server) limiter(ws *workspace) (*limits.Limiter, error) {
	slot := &ws.limiter
	if l := slot.l.Load(); l != nil {
		return l, nil
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if l := slot.l.Load(); l != nil {
		return l, nil
	}
	if time.Since(slot.failed) < time.Second {
		return nil, slot.err
	}
	l, err := s.openLimiter(ws)
	if err != nil {
		slot.failed, slot.err = time.Now(), err
		return nil, err
	}
	slot.l.Store(l)
	return l, nil
}

// openLimiter opens the workspace's limits bucket, replicated like its
// topic.
func (s *Server) openLimiter(ws *workspace) (*limits.Limiter, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	topic, err := s.opts.Store.JS.Stream(ctx, store.StreamName(ws.id))
	if err != nil {
		return nil, fmt.Errorf("topic of %s: %w", ws.id, err)
	}
	return limits.Open(ctx, s.opts.Store.JS, ws.id, limits.Options{
		Clock:    s.opts.Clock,
		Replicas: topic.CachedInfo().Config.Replicas,
		// A slot outlives its request, with a minute for the clocks of
		// replicas to differ.
		Lease:  s.opts.RequestTimeout + time.Minute,
		Logger: s.log,
	})
}
