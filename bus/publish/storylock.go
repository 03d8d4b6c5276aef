package publish

import (
	"context"
	"hash/maphash"
	"time"
)

// storyLockCount is how many locks a sole writer's stories share: enough
// that two busy stories rarely wait for each other.
const storyLockCount = 4096

// storyLocks serialises the snapshots of each story in a sole-writer Core.
// A story hashes to one of a fixed set of locks, each a channel of one
// slot, so that waiting for one ends with the request's context.
type storyLocks struct {
	seed  maphash.Seed
	slots [storyLockCount]chan struct{}
}

func newStoryLocks() *storyLocks {
	l := &storyLocks{seed: maphash.MakeSeed()}
	for i := range l.slots {
		l.slots[i] = make(chan struct{}, 1)
	}
	return l
}

// lock waits until the story's lock is free, and returns it to release
// (storyLock.release). It does not wait when less than reserve is left
// before ctx's deadline, and stops waiting then, or when ctx is done; a
// ctx without a deadline waits as long as the lock's holders (each bounded
// by its own deadline).
func (l *storyLocks) lock(ctx context.Context, story string, reserve time.Duration) (storyLock, error) {
	slot := l.slots[maphash.String(l.seed, story)%storyLockCount]
	select {
	case slot <- struct{}{}:
		return storyLock(slot), nil
	default:
	}
	if deadline, ok := ctx.Deadline(); ok {
		if time.Until(deadline) < reserve {
			return nil, context.DeadlineExceeded
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-reserve))
		defer cancel()
	}
	select {
	case slot <- struct{}{}:
		return storyLock(slot), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// storyLock is a held lock of storyLocks.
type storyLock chan struct{}

func (l storyLock) release() { <-l }
