package publish

import (
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
