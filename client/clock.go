package client

import (
	"context"
	"time"
)

// Clock tells the time and waits. The client waits only through its Clock,
// so that tests cross the 30 s retry window without sleeping.
type Clock interface {
	Now() time.Time
	// Sleep waits for d, or until ctx ends, when it returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits for d or until ctx ends.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
