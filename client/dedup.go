package client

import "time"

// Dedup remembers the message_ids a consumer has handled, so that the
// duplicates of at-least-once delivery are dropped. Its memory is bounded:
// it remembers at most Size ids, none for longer than Window. A duplicate
// arriving later than that is handled again, so a consumer's handling
// should still be idempotent where it matters (a snapshot's
// sequence_number tells a newer one from an older one).
type Dedup struct {
	seen  *lru[struct{}]
	clock Clock
}

// Defaults of NewDedup.
const (
	DefaultDedupSize   = 100_000
	DefaultDedupWindow = 24 * time.Hour
)

// NewDedup returns a de-duplicator of at most size ids (default 100,000),
// each remembered for window (default 24 hours). clock may be nil.
func NewDedup(size int, window time.Duration, clock Clock) *Dedup {
	if size <= 0 {
		size = DefaultDedupSize
	}
	if window <= 0 {
		window = DefaultDedupWindow
	}
	if clock == nil {
		clock = SystemClock{}
	}
	return &Dedup{seen: newLRU[struct{}](size, window), clock: clock}
}

// Seen reports whether id was marked done within the window.
func (d *Dedup) Seen(id string) bool {
	_, ok := d.seen.get(id, d.clock.Now())
	return ok
}

// Done marks id as handled.
func (d *Dedup) Done(id string) { d.seen.add(id, struct{}{}, d.clock.Now()) }

// Len returns how many ids are remembered.
func (d *Dedup) Len() int { return d.seen.len() }
