package bus

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/rules"
)

// limit is stage 6: the connection's rate limit and daily quota, counted
// in the workspace's limits bucket so that they hold across every replica
// (package limits). A connection without limits costs nothing here.
//
// A request admitted under a daily quota holds a slot of it until the
// request ends: countAccepted counts it when the message is accepted, and
// the end of any other request frees it, so only accepted messages count.
// Without quota, the request is limited by its connection's rate alone.
func (s *Server) limit(r *request, quota bool) []rules.Violation {
	lim := r.limits
	if !quota {
		lim.DailyQuota = 0
	}
	if lim.RatePerSecond <= 0 && lim.DailyQuota <= 0 {
		return nil
	}
	d, err := r.ws.limiter.Admit(r.conn.Name, lim)
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
		r.reservation = res
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
	if r.reservation != nil {
		r.reservation.Accept()
	}
}

// openLimiter opens the workspace's limits bucket, replicated like its
// topic, when the workspace is applied: rate limits, quotas and token
// attempts are counted from its first request on.
func (s *Server) openLimiter(ctx context.Context, workspace string) (*limits.Limiter, error) {
	return limits.Open(ctx, s.opts.Store.JS, workspace, limits.Options{
		Clock:    s.opts.Clock,
		Replicas: s.opts.Store.Replicas(),
		Shared:   s.opts.Store.SharedBuckets(),
		// A slot outlives its request, with a minute for the clocks of
		// replicas to differ.
		Lease:  s.opts.RequestTimeout + time.Minute,
		Logger: s.log,
		Watch:  s.opts.Store.Watch,
	})
}
