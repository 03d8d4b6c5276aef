package publish

import (
	"context"
	"sync"
)

// A sequencer orders each story's snapshots on the topic: each is
// published right after the head it was decided over, or not at all. The
// attempt reads the same on both implementations: casSequencer, which
// leaves the order to the store's compare-and-swap, and soleWriter
// (sole.go), which keeps it in the process when the bus is its store's
// only writer.
type sequencer interface {
	// begin starts a snapshot attempt's turn on its story; an error means
	// the story could not be had in time, and nothing was done.
	begin(ctx context.Context, story, subject string) (turn, error)
}

// A turn is one snapshot attempt's use of its story, from the head check
// to the store's answer.
type turn interface {
	// head is the head to decide over: the cached one, or the store's
	// when the story is not cached or its cached head may have aged out
	// of the topic.
	head(ctx context.Context) (Head, error)
	// confirm reads the head from the topic's leader after the topic
	// refused a publish over the one decided on, and caches it.
	confirm(ctx context.Context) (Head, error)
	// seen caches a head the attempt read from the store itself.
	seen(h Head)
	// sending is called just before the snapshot is sent over h. It
	// returns the stream sequence the publish must expect as its story's
	// last (the compare-and-swap), or swap false to publish without it.
	sending(h Head) (seq uint64, swap bool)
	// acked caches h, the head the topic's acknowledgement of this
	// attempt's publish made.
	acked(h Head)
	// end ends the turn.
	end()
}

// casSequencer orders snapshots by the topic's compare-and-swap: each is
// published expecting the head it was decided over as its story's last
// message, and the store refuses it if anything came in between. Its head
// cache only spares a read: a cached head, like one a replica of the topic
// gives, can only be behind the leader's, so a refusal from it is right, an
// acceptance is confirmed by the store, and a head the store refused is
// read again from the topic's leader.
type casSequencer struct {
	heads *headCache
	// read reads a story's head from the store (Core.readHead), and
	// leader from the topic's leader (Core.confirmHead).
	read, leader func(ctx context.Context, subject string) (Head, error)
	// behind estimates how often a cached head is behind the topic's:
	// when other buses write the same stories (a pool's replicas behind a
	// front that balances each request), the cache is a poor guide, and
	// a cached head is read again from the leader first.
	behind staleness
}

func (s *casSequencer) begin(_ context.Context, story, subject string) (turn, error) {
	return &casTurn{s: s, story: story, subject: subject}, nil
}

// current returns the story's cached head, or reads it from the store
// when the cache does not know it or it may have aged out of the topic.
// cached reports that the head is the cache's, unconfirmed.
func (s *casSequencer) current(ctx context.Context, story, subject string) (h Head, cached bool, err error) {
	h, ok := s.heads.fresh(story)
	switch {
	case !ok:
		h, err = s.readAgain(ctx, story, subject)
		return h, false, err
	case !s.behind.likely():
		return h, true, nil
	}
	// Cached heads have often been behind lately: one read of the leader
	// now costs less than a publish the topic refuses, a read of the
	// leader, a read and a rewrite of the record, and a publish again.
	lh, err := s.confirm(ctx, story, subject)
	if err == nil {
		s.behind.observe(lh.SubjectSeq != h.SubjectSeq)
	}
	return lh, false, err
}

// readAgain reads the story's head from the store and caches it, whatever
// the cache held.
func (s *casSequencer) readAgain(ctx context.Context, story, subject string) (Head, error) {
	h, err := s.read(ctx, subject)
	return s.keep(story, h, err)
}

// confirm reads the story's head from the topic's leader and caches it,
// whatever the cache held.
func (s *casSequencer) confirm(ctx context.Context, story, subject string) (Head, error) {
	h, err := s.leader(ctx, subject)
	return s.keep(story, h, err)
}

// keep caches h, just read from the store, unless the read failed.
func (s *casSequencer) keep(story string, h Head, err error) (Head, error) {
	if err != nil {
		return Head{}, err
	}
	s.heads.replace(story, h)
	return h, nil
}

// casTurn is a snapshot's turn under the compare-and-swap.
type casTurn struct {
	s              *casSequencer
	story, subject string
	// cached is set while the head decided over is the cache's,
	// unconfirmed: the topic's answer to its publish says whether it was
	// behind.
	cached bool
}

func (t *casTurn) head(ctx context.Context) (Head, error) {
	h, cached, err := t.s.current(ctx, t.story, t.subject)
	t.cached = cached
	return h, err
}

func (t *casTurn) confirm(ctx context.Context) (Head, error) {
	if t.cached {
		// The topic refused a publish over the cached head.
		t.s.behind.observe(true)
		t.cached = false
	}
	return t.s.confirm(ctx, t.story, t.subject)
}

func (t *casTurn) seen(h Head) { t.s.heads.put(t.story, h) }

func (t *casTurn) sending(h Head) (uint64, bool) { return h.SubjectSeq, true }

func (t *casTurn) acked(h Head) {
	if t.cached {
		t.s.behind.observe(false)
		t.cached = false
	}
	t.s.heads.acked(t.story, h)
}

// staleness is a moving estimate of how often a cached head is behind:
// each observation weighs a sixteenth, so a few dozen publishes move it
// from one regime to the other.
type staleness struct {
	mu       sync.Mutex
	estimate float64
}

// staleAbove is the estimate over which a cached head is read again from
// the leader before it is used: a head behind costs about three store
// requests and four round trips more, a read of the leader one of each.
const staleAbove = 0.3

func (s *staleness) observe(behind bool) {
	x := 0.0
	if behind {
		x = 1
	}
	s.mu.Lock()
	s.estimate += (x - s.estimate) / 16
	s.mu.Unlock()
}

func (s *staleness) likely() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.estimate > staleAbove
}

func (t *casTurn) end() {}
