package publish

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestStoryLocksAreOnePerStory: a story's snapshots wait for each other,
// two stories never do, and a lock nobody holds or waits for is dropped.
func TestStoryLocksAreOnePerStory(t *testing.T) {
	l := newStoryLocks()
	ctx := context.Background()
	s1, err := l.lock(ctx, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	// However many other stories, none waits for s1.
	for i := range 10_000 {
		story := fmt.Sprint("other-", i)
		held, err := l.lock(ctx, story, 0)
		if err != nil {
			t.Fatalf("%s waited for s1: %v", story, err)
		}
		l.unlock(story, held)
	}
	if n := l.len(); n != 1 {
		t.Fatalf("%d locks kept, want s1's alone", n)
	}

	got := make(chan *storyLock)
	go func() {
		held, err := l.lock(ctx, "s1", 0)
		if err != nil {
			t.Error(err)
		}
		got <- held
	}()
	select {
	case <-got:
		t.Fatal("a second snapshot of s1 took the lock while it was held")
	case <-time.After(50 * time.Millisecond):
	}
	l.unlock("s1", s1)
	select {
	case held := <-got:
		l.unlock("s1", held)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting snapshot did not get s1 once it was released")
	}
	if n := l.len(); n != 0 {
		t.Fatalf("%d locks kept with none held", n)
	}
}

// TestStoryLockWaitLeavesTheReserve: a snapshot does not wait for its
// story when less than the reserve is left before its deadline, stops
// waiting when only the reserve is left, and leaves no lock behind.
func TestStoryLockWaitLeavesTheReserve(t *testing.T) {
	l := newStoryLocks()
	held, err := l.lock(context.Background(), "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := l.lock(short, "s1", 5*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with less than the reserve left: %v, want the deadline", err)
	}
	longer, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	started := time.Now()
	if _, err := l.lock(longer, "s1", 5*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting into the reserve: %v, want the deadline", err)
	}
	if waited := time.Since(started); waited > 4*time.Second {
		t.Fatalf("waited %v, into the reserve", waited)
	}
	l.unlock("s1", held)
	if n := l.len(); n != 0 {
		t.Fatalf("%d locks kept after the waiters gave up and the holder left", n)
	}
}

// TestStoryLocksSerialiseUnderContention: many snapshots of a few stories
// at once never hold one story's lock together.
func TestStoryLocksSerialiseUnderContention(t *testing.T) {
	l := newStoryLocks()
	var mu sync.Mutex
	inside := map[string]int{}
	var wg sync.WaitGroup
	for i := range 64 {
		story := fmt.Sprint("s", i%4)
		wg.Go(func() {
			for range 200 {
				held, err := l.lock(context.Background(), story, 0)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside[story]++
				if inside[story] > 1 {
					t.Errorf("%d holders of %s at once", inside[story], story)
				}
				mu.Unlock()
				runtime.Gosched() // another holder, if the lock let one in, runs now
				mu.Lock()
				inside[story]--
				mu.Unlock()
				l.unlock(story, held)
			}
		})
	}
	wg.Wait()
	if n := l.len(); n != 0 {
		t.Fatalf("%d locks kept with none held", n)
	}
}
