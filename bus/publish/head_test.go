package publish

import (
	"fmt"
	"testing"

	"github.com/storybus/storybus/bus/rules"
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
	c := newHeadCache(3)
	for i, story := range []string{"a", "b", "c"} {
		c.put(story, Head{Exists: true, SubjectSeq: uint64(i + 1)})
	}
	c.get("a") // now b is the least recently used
	c.put("d", Head{Exists: true, SubjectSeq: 4})
	for story, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok := c.heads.Peek(story); ok != want {
			t.Errorf("%s cached %v, want %v", story, ok, want)
		}
	}
	c.put("c", Head{Exists: true, SubjectSeq: 5}) // c used: a is the oldest
	c.put("e", Head{Exists: true, SubjectSeq: 6})
	if _, ok := c.get("a"); ok {
		t.Error("a was kept over more recently used heads")
	}
	for _, story := range []string{"c", "d", "e"} {
		if _, ok := c.get(story); !ok {
			t.Errorf("%s was forgotten", story)
		}
	}
	c.put("e", Head{Exists: true, SubjectSeq: 2})
	if h, _ := c.get("e"); h.SubjectSeq != 6 {
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
