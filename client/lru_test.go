package client

import (
	"fmt"
	"testing"
	"time"
)

// TestLRUEvictsTheLeastRecentlyAdded fills a map of three, adds the oldest
// again, then a fourth: only the least recently added entry is forgotten,
// the others are all kept; and entries leave after the window.
func TestLRUEvictsTheLeastRecentlyAdded(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	l := newLRU[int](3, time.Hour)
	for i, k := range []string{"a", "b", "c"} {
		l.add(k, i, now)
	}
	l.add("a", 10, now.Add(time.Minute))
	l.add("d", 3, now.Add(2*time.Minute))
	if l.len() != 3 {
		t.Fatalf("a full map holds %d, want 3", l.len())
	}
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok := l.get(k, now.Add(2*time.Minute)); ok != want {
			t.Errorf("%s kept %v, want %v", k, ok, want)
		}
	}
	if v, _ := l.get("a", now.Add(2*time.Minute)); v != 10 {
		t.Errorf("a = %d, want the value added again", v)
	}
	var order []string
	for _, e := range l.oldestFirst() {
		order = append(order, e.key)
	}
	if got := fmt.Sprint(order); got != "[c a d]" {
		t.Errorf("oldest first: %s", got)
	}
	// c was added at now: past the window it goes, a and d stay.
	l.add("e", 4, now.Add(time.Hour))
	if _, ok := l.get("c", now.Add(time.Hour)); ok || l.len() != 3 {
		t.Fatalf("after the window: c kept %v, len %d", ok, l.len())
	}
}
