package filewatch

import (
	"testing"
	"time"
)

// TestDebounceIsBounded drives the debounce with a clock of its own: a
// lone change is read Quiet later; changes 50 ms apart without end
// are read MaxDelay after the first, every time.
func TestDebounceIsBounded(t *testing.T) {
	d := debounce{quiet: Quiet, max: MaxDelay}
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	if due := d.changed(start); !due.Equal(start.Add(Quiet)) {
		t.Fatalf("a lone change is due at %s, want %s", due.Sub(start), Quiet)
	}
	d.fired()

	now := start
	first := now
	reads := 0
	for range 200 { // 10 s of changes 50 ms apart
		due := d.changed(now)
		if due.Sub(first) > MaxDelay {
			t.Fatalf("a change at %s is due %s after the first of its run", now.Sub(start), due.Sub(first))
		}
		now = now.Add(50 * time.Millisecond)
		if !now.Before(due) {
			d.fired()
			reads++
			first = now
		}
	}
	if want := int(10 * time.Second / MaxDelay); reads < want-1 {
		t.Fatalf("%d reads in 10 s of changes, want about %d", reads, want)
	}
}
