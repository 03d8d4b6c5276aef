package bus

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/storybus/storybus/rules"
)

// TestAcceptedAnswerIsWhatTheEncoderWrites: the hand-written JSON of the
// usual 202 is byte for byte what encoding/json writes, and strings JSON
// would escape are left to the encoder.
func TestAcceptedAnswerIsWhatTheEncoderWrites(t *testing.T) {
	for _, a := range []Accepted{
		{Accepted: true, MessageID: "6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20", MessageType: "story.context", Family: "story-context", Tolerated: []rules.Violation{}},
		{Accepted: true, MessageID: "x", MessageType: "story.event", Family: "story-event"},
		{MessageID: "", MessageType: "asset.reference", Family: "asset-reference"},
	} {
		got, ok := a.appendPlain(nil)
		if !ok {
			t.Fatalf("%+v: not written by hand", a)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		a.Tolerated = []rules.Violation{}
		if err := enc.Encode(a); err != nil {
			t.Fatal(err)
		}
		if want := bytes.TrimSuffix(buf.Bytes(), []byte("\n")); !bytes.Equal(got, want) {
			t.Errorf("by hand %s\nencoder %s", got, want)
		}
	}
	for _, id := range []string{`a"b`, `a\b`, "a\nb", "é", "a\x7fb"} {
		if _, ok := (Accepted{MessageID: id}).appendPlain(nil); ok {
			t.Errorf("%q written by hand; want the encoder", id)
		}
	}
}
