package pool

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entry is a change of a pool's documents bucket.
type entry struct {
	key, value string
	op         jetstream.KeyValueOp
}

func (e entry) Bucket() string                  { return "storybus-pool-test" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return []byte(e.value) }
func (e entry) Revision() uint64                { return 0 }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

var _ jetstream.KeyValueEntry = entry{}

// TestLatestAppliesEachWorkspacesNewestChangeOnce: of the changes waiting
// behind the first, a replica applies each workspace's last once, in the
// order the workspaces came, a removal included; it stops at the end of
// the current values and at the end of the watch, and takes only what is
// already waiting.
func TestLatestAppliesEachWorkspacesNewestChangeOnce(t *testing.T) {
	put := func(key, value string) jetstream.KeyValueEntry { return entry{key, value, jetstream.KeyValuePut} }
	waiting := func(es ...jetstream.KeyValueEntry) chan jetstream.KeyValueEntry {
		ch := make(chan jetstream.KeyValueEntry, len(es))
		for _, e := range es {
			ch <- e
		}
		return ch
	}
	describe := func(batch []jetstream.KeyValueEntry) []string {
		var out []string
		for _, e := range batch {
			out = append(out, e.Key()+"="+string(e.Value())+"/"+e.Operation().String())
		}
		return out
	}
	for name, tc := range map[string]struct {
		first       jetstream.KeyValueEntry
		rest        []jetstream.KeyValueEntry
		close       bool
		want        []string
		end, closed bool
		left        int
	}{
		"nothing waiting": {first: put("a", "1"), want: []string{"a=1/KeyValuePutOp"}},
		"newer documents replace older ones in place": {
			first: put("a", "1"),
			rest:  []jetstream.KeyValueEntry{put("b", "1"), put("a", "2"), put("c", "1"), put("a", "3"), put("b", "2")},
			want:  []string{"a=3/KeyValuePutOp", "b=2/KeyValuePutOp", "c=1/KeyValuePutOp"},
		},
		"a removal after a document wins": {
			first: put("a", "1"),
			rest:  []jetstream.KeyValueEntry{entry{"a", "", jetstream.KeyValueDelete}},
			want:  []string{"a=/KeyValueDeleteOp"},
		},
		"the end of the current values stops it": {
			first: put("a", "1"),
			rest:  []jetstream.KeyValueEntry{put("b", "1"), nil, put("a", "2")},
			want:  []string{"a=1/KeyValuePutOp", "b=1/KeyValuePutOp"}, end: true, left: 1,
		},
		"the end marker first": {first: nil, rest: []jetstream.KeyValueEntry{put("a", "1")}, end: true, left: 1},
		"the end of the watch": {
			first: put("a", "1"), rest: []jetstream.KeyValueEntry{put("a", "2")}, close: true,
			want: []string{"a=2/KeyValuePutOp"}, closed: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			ch := waiting(tc.rest...)
			if tc.close {
				close(ch)
			}
			batch, end, closed := latest(tc.first, ch)
			got := describe(batch)
			if len(got) != len(tc.want) {
				t.Fatalf("batch %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("batch %q, want %q", got, tc.want)
				}
			}
			if end != tc.end || closed != tc.closed {
				t.Errorf("end %v closed %v, want %v %v", end, closed, tc.end, tc.closed)
			}
			if !tc.close && len(ch) != tc.left {
				t.Errorf("%d changes left waiting, want %d", len(ch), tc.left)
			}
		})
	}
}
