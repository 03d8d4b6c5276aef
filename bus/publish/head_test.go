package publish

import (
	"fmt"
	"testing"
	"time"

	"github.com/storybus/storybus/rules"
)

func TestCheckSequence(t *testing.T) {
	live := Head{Exists: true, SequenceNumber: 4, State: "published"}
	killed := Head{Exists: true, SequenceNumber: 4, State: StateKilled}
	for _, tc := range []struct {
		name    string
		head    Head
		seq     int64
		refusal string
		warning string
	}{
		{"first snapshot at 1", Head{}, 1, "", ""},
		{"first snapshot later", Head{}, 7, "", rules.SequenceStart},
		{"next", live, 5, "", ""},
		{"gap", live, 9, "", rules.SequenceGap},
		{"same", live, 4, rules.SequenceStale, ""},
		{"older", live, 2, rules.SequenceStale, ""},
		{"after kill", killed, 5, rules.SequenceTerminal, ""},
		{"older than kill", killed, 3, rules.SequenceTerminal, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refusal, warnings := CheckSequence(tc.head, tc.seq)
			got := ""
			if refusal != nil {
				got = refusal.Rule
				if refusal.Source != rules.SourceSequence || refusal.Path != "/payload/sequence_number" {
					t.Fatalf("refusal %+v", refusal)
				}
			}
			if got != tc.refusal {
				t.Fatalf("refusal %q, want %q", got, tc.refusal)
			}
			gotWarn := ""
			if len(warnings) == 1 {
				gotWarn = warnings[0].Rule
			} else if len(warnings) > 1 {
				t.Fatalf("warnings %v", warnings)
			}
			if gotWarn != tc.warning {
				t.Fatalf("warning %q, want %q", gotWarn, tc.warning)
			}
		})
	}
}

// TestHeadCacheForgetsTheLeastRecentlyUsed: a full cache forgets the head
// used longest ago, one at a time, never a recently read one; and it never
// goes back to an older head of a story.
func TestHeadCacheForgetsTheLeastRecentlyUsed(t *testing.T) {
	c := newHeadCache(3, SystemClock{}, 0)
	for i, story := range []string{"a", "b", "c"} {
		c.put(story, Head{Exists: true, SubjectSeq: uint64(i + 1)})
	}
	c.fresh("a") // now b is the least recently used
	c.put("d", Head{Exists: true, SubjectSeq: 4})
	for story, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok := c.heads.Peek(story); ok != want {
			t.Errorf("%s cached %v, want %v", story, ok, want)
		}
	}
	c.put("c", Head{Exists: true, SubjectSeq: 5}) // c used: a is the oldest
	c.put("e", Head{Exists: true, SubjectSeq: 6})
	if _, ok := c.fresh("a"); ok {
		t.Error("a was kept over more recently used heads")
	}
	for _, story := range []string{"c", "d", "e"} {
		if _, ok := c.fresh(story); !ok {
			t.Errorf("%s was forgotten", story)
		}
	}
	c.put("e", Head{Exists: true, SubjectSeq: 2})
	if h, _ := c.fresh("e"); h.SubjectSeq != 6 {
		t.Errorf("an older head replaced a newer one: %+v", h)
	}
	// However many stories pass, the cache holds its size.
	for i := range 1000 {
		c.put(fmt.Sprint("s", i), Head{Exists: true, SubjectSeq: uint64(i)})
	}
	if n := c.heads.Len(); n != 3 {
		t.Errorf("%d heads cached, want 3", n)
	}
}

// stepClock is a clock that tests move by hand.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time { return c.now }

// TestHeadCacheAgesHeadsOnItsClock: with a topic retention, a head is
// served until half of it has passed on the cache's clock since its message
// was written, and not from then on; without one, heads never age.
func TestHeadCacheAgesHeadsOnItsClock(t *testing.T) {
	const retention = 48 * time.Hour
	clock := &stepClock{now: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}
	c := newHeadCache(10, clock, retention)
	c.acked("acked", Head{Exists: true, SubjectSeq: 1})
	c.replace("read", Head{Exists: true, SubjectSeq: 2, Time: clock.now.Add(-time.Hour)})
	c.replace("new", Head{}) // a story with no snapshot: nothing to age
	if h, ok := c.fresh("acked"); !ok || h.source != headAcked || !h.Time.Equal(clock.now) {
		t.Fatalf("acked head %+v (%v): want one from an acknowledgement, stamped now", h, ok)
	}
	if h, _ := c.fresh("read"); h.source != headRead {
		t.Fatalf("head read from the store is %v", h.source)
	}
	clock.now = clock.now.Add(retention/2 - time.Hour - time.Nanosecond)
	for _, story := range []string{"acked", "read", "new"} {
		if _, ok := c.fresh(story); !ok {
			t.Errorf("%s aged before half the retention", story)
		}
	}
	clock.now = clock.now.Add(time.Nanosecond)
	if _, ok := c.fresh("read"); ok {
		t.Error("the head read from the store is served at half the retention")
	}
	if _, ok := c.fresh("acked"); !ok {
		t.Error("the acked head, written an hour later, aged with the other")
	}
	clock.now = clock.now.Add(time.Hour)
	if _, ok := c.fresh("acked"); ok {
		t.Error("the acked head is served at half the retention")
	}
	if _, ok := c.fresh("new"); !ok {
		t.Error("a story with no snapshot aged")
	}

	forever := newHeadCache(10, clock, 0)
	forever.acked("s", Head{Exists: true, SubjectSeq: 1})
	clock.now = clock.now.Add(10 * 365 * 24 * time.Hour)
	if _, ok := forever.fresh("s"); !ok {
		t.Error("a head aged without a topic retention")
	}
}
