package publish

import (
	"context"
	"time"
)

// soleWriter orders snapshots in the process, for a Core that is its
// topic's only writer (Options.SoleWriter). A story's snapshots take turns
// from the head check to the store's answer, and one over a head learnt
// from this process's own acknowledgement goes without the compare-and-swap:
// that head is the store's, as the story's only publishes are this
// process's, one at a time on one connection. Any other head is confirmed
// by the store, as in casSequencer. The argument: docs/publish-core.md, "A
// sole writer publishes without the compare-and-swap".
type soleWriter struct {
	cas   *casSequencer
	locks *storyLocks
	// reserve is the time a snapshot must have left to wait for its
	// story: the store operations' deadline.
	reserve time.Duration
}

func newSoleWriter(cas *casSequencer, reserve time.Duration) *soleWriter {
	return &soleWriter{cas: cas, locks: newStoryLocks(), reserve: reserve}
}

// begin waits for the story's turn.
func (s *soleWriter) begin(ctx context.Context, story, subject string) (turn, error) {
	held, err := s.locks.lock(ctx, story, s.reserve)
	if err != nil {
		return nil, err
	}
	return &soleTurn{casTurn: casTurn{s: s.cas, story: story, subject: subject}, locks: s.locks, held: held}, nil
}

// soleTurn is a snapshot's turn under the sole writer: it holds its
// story's lock until end.
type soleTurn struct {
	casTurn
	locks *storyLocks
	held  *storyLock
	// sent says a publish of this turn reached the connection, and
	// settled that its acknowledgement made the cached head this turn's.
	sent, settled bool
}

// sending publishes without the compare-and-swap over a head of this
// process's own that has not aged.
func (t *soleTurn) sending(h Head) (uint64, bool) {
	t.sent = true
	if h.source == headAcked && !t.s.heads.aged(h) {
		return 0, false
	}
	return h.SubjectSeq, true
}

func (t *soleTurn) acked(h Head) {
	t.casTurn.acked(h)
	t.settled = true
}

// end forgets the head of a story sent to and not settled, and gives the
// story to its next snapshot.
func (t *soleTurn) end() {
	if t.sent && !t.settled {
		t.s.heads.forget(t.story)
	}
	t.locks.unlock(t.story, t.held)
}
