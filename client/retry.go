package client

import (
	"errors"
	"time"
)

// RetryPolicy says how often and how long the client retries a message
// whose outcome is unknown or temporarily refused (timeouts, network
// errors, 429, 5xx).
//
// The wait before the n-th retry is a random duration between half and all
// of min(Initial × 2ⁿ⁻¹, Max): with the defaults 0.25–0.5 s, 0.5–1 s,
// 1–2 s, … up to 15–30 s. A Retry-After longer than that wait is honoured.
type RetryPolicy struct {
	// Initial is the nominal first wait; default 500 ms.
	Initial time.Duration
	// Max caps every wait; default 30 s.
	Max time.Duration
	// Attempts is the most times a message is sent before it is kept in
	// the outbox; default 10, which waits at least 60 s in all (at most
	// about 2 minutes), more than the 30 s the bus may need to release a
	// message recorded but not yet published.
	Attempts int
	// MaxRetryAfter is the longest Retry-After the client waits for; a
	// longer one (a daily quota, for example) ends the retries at once and
	// the message is kept. Default 5 minutes.
	MaxRetryAfter time.Duration
}

// MinRetryWindow is the shortest time a policy must keep retrying: a
// message the bus recorded but did not confirm is answered 503
// message.in_flight for up to 30 s.
const MinRetryWindow = 30 * time.Second

// DefaultRetryPolicy returns the documented policy.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Initial: 500 * time.Millisecond, Max: 30 * time.Second, Attempts: 10, MaxRetryAfter: 5 * time.Minute}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.Initial <= 0 {
		p.Initial = d.Initial
	}
	if p.Max <= 0 {
		p.Max = d.Max
	}
	if p.Attempts <= 0 {
		p.Attempts = d.Attempts
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = d.MaxRetryAfter
	}
	return p
}

// Validate reports a policy that gives up before MinRetryWindow even with
// the shortest waits.
func (p RetryPolicy) Validate() error {
	p = p.withDefaults()
	if p.MinTotalWait() < MinRetryWindow {
		return errors.New("client: the retry policy can give up in under 30 s: raise Attempts or Initial")
	}
	return nil
}

// Backoff returns the wait before retry n (n ≥ 1), for a jitter fraction j
// in [0, 1).
func (p RetryPolicy) Backoff(n int, j float64) time.Duration {
	p = p.withDefaults()
	base := p.Initial
	for i := 1; i < n && base < p.Max; i++ {
		base *= 2
	}
	base = min(base, p.Max)
	j = min(max(j, 0), 1)
	return base/2 + time.Duration(float64(base/2)*j)
}

// MinTotalWait returns the shortest time the policy spends waiting before
// it gives up: every wait at its lowest.
func (p RetryPolicy) MinTotalWait() time.Duration {
	p = p.withDefaults()
	var total time.Duration
	for n := 1; n < p.Attempts; n++ {
		total += p.Backoff(n, 0)
	}
	return total
}
