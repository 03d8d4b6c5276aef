package publish

import (
	"context"
	"sync"
	"time"
)

// storyLocks serialises the snapshots of each story in a sole-writer Core:
// one lock per story being published, made when the first snapshot of a
// story asks for it and dropped when its last holder or waiter leaves, so
// that two stories never wait for each other and an idle workspace holds
// none. A lock is a channel of one slot, so that waiting for one ends with
// the request's context.
type storyLocks struct {
	mu    sync.Mutex
	locks map[string]*storyLock
	// free keeps dropped locks for reuse: a lock per snapshot, not an
	// allocation per snapshot.
	free sync.Pool
}

// storyLock is the lock of one story.
type storyLock struct {
	slot chan struct{}
	// users counts the holder and the waiters, under storyLocks.mu: the
	// lock is dropped when it falls to 0.
	users int
}

func newStoryLocks() *storyLocks {
	return &storyLocks{
		locks: map[string]*storyLock{},
		free:  sync.Pool{New: func() any { return &storyLock{slot: make(chan struct{}, 1)} }},
	}
}

// lock waits until the story's lock is free, and returns it held, for
// unlock. It does not wait when less than reserve is left before ctx's
// deadline, and stops waiting then, or when ctx is done; a ctx without a
// deadline waits as long as the lock's holders (each bounded by its own
// deadline).
func (l *storyLocks) lock(ctx context.Context, story string, reserve time.Duration) (*storyLock, error) {
	l.mu.Lock()
	s := l.locks[story]
	if s == nil {
		s = l.free.Get().(*storyLock)
		l.locks[story] = s
	}
	s.users++
	l.mu.Unlock()
	select {
	case s.slot <- struct{}{}:
		return s, nil
	default:
	}
	if deadline, ok := ctx.Deadline(); ok {
		if time.Until(deadline) < reserve {
			l.leave(story, s)
			return nil, context.DeadlineExceeded
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-reserve))
		defer cancel()
	}
	select {
	case s.slot <- struct{}{}:
		return s, nil
	case <-ctx.Done():
		l.leave(story, s)
		return nil, ctx.Err()
	}
}

// unlock releases the story's lock s, held by lock.
func (l *storyLocks) unlock(story string, s *storyLock) {
	<-s.slot
	l.leave(story, s)
}

// leave counts out a holder that released the lock or a waiter that gave
// up, and drops the lock when nobody is left: its slot is empty then.
func (l *storyLocks) leave(story string, s *storyLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.users--; s.users == 0 {
		delete(l.locks, story)
		l.free.Put(s)
	}
}

// len is how many stories hold a lock.
func (l *storyLocks) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks)
}
