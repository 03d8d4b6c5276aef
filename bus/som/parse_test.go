package som_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/storybus/storybus/bus/som"
)

func nested(depth int) string {
	// depth counts the top-level object: {"a":[[...]]} with depth-1 arrays.
	return `{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		// msg is a substring of the error message; path its JSON Pointer.
		msg, path string
	}{
		{"empty body", ``, "empty", ""},
		{"whitespace only", " \n\t", "empty", ""},
		{"array top level", `[{"a":1}]`, "not an array", ""},
		{"string top level", `"x"`, "not a string", ""},
		{"number top level", `42`, "not a number", ""},
		{"null top level", `null`, "not null", ""},
		{"boolean top level", `true`, "not a boolean", ""},
		{"not JSON", `hello`, "not JSON", ""},
		{"not a literal", `txyz`, "not JSON", ""},
		{"broken array top level", `[1,`, "not JSON", "/1"},
		{"byte order mark", "\ufeff{}", "not JSON", ""},
		{"trailing object", `{} {}`, "after the JSON object", ""},
		{"trailing garbage", `{"a":1}x`, "after the JSON object", ""},
		{"trailing comma", `{"a":1,}`, "member name", ""},
		{"unterminated object", `{"a":1`, "unexpected end", "/a"},
		{"missing colon", `{"a" 1}`, "':'", "/a"},
		{"single quotes", `{'a':1}`, "member name", ""},
		{"duplicate at top", `{"a":1,"b":2,"a":3}`, "duplicate member name 'a'", "/a"},
		{"duplicate nested", `{"payload":{"x":[{"k":1,"k":1}]}}`, "duplicate member name 'k'", "/payload/x/0/k"},
		{"duplicate through an escape", `{"a":1,"\u0061":2}`, "duplicate member name 'a'", "/a"},
		{"duplicate escaped path", `{"a/b~c":{"z":1,"z":2}}`, "duplicate", "/a~1b~0c/z"},
		{"too deep", nested(som.MaxDepth + 1), "deeper than 64", "/a" + strings.Repeat("/0", som.MaxDepth-1)},
		{"huge number", `{"n":1e400}`, "outside the range", "/n"},
		{"huge negative number", `{"n":-1.8e308}`, "outside the range", "/n"},
		{"long huge integer", `{"n":` + strings.Repeat("9", 400) + `}`, "outside the range", "/n"},
		{"number rounding to zero", `{"n":1e-400}`, "round to 0", "/n"},
		{"leading zero", `{"n":01}`, "not JSON", "/n"},
		{"bare minus", `{"n":-}`, "invalid number", "/n"},
		{"no fraction digits", `{"n":1.}`, "invalid number", "/n"},
		{"no exponent digits", `{"n":1e+}`, "invalid number", "/n"},
		{"NaN", `{"n":NaN}`, "not JSON", "/n"},
		{"bad literal", `{"n":tru}`, "not JSON", "/n"},
		{"invalid UTF-8 in a string", "{\"s\":\"caf\xe9\"}", "not UTF-8", "/s"},
		{"invalid UTF-8 in a name", "{\"\xff\":1}", "not UTF-8", ""},
		{"invalid UTF-8 outside strings", "{\"s\":1}\xc3\xa9", "after the JSON object", ""},
		{"UTF-8 surrogate", "{\"s\":\"\xed\xa0\x80\"}", "not UTF-8", "/s"},
		{"lone high surrogate", `{"s":"\ud800"}`, "lone high surrogate", "/s"},
		{"lone low surrogate", `{"s":"\udc00x"}`, "lone low surrogate", "/s"},
		{"high surrogate then non-surrogate", `{"s":"\ud800\u0041"}`, "lone high surrogate", "/s"},
		{"bad unicode escape", `{"s":"\u12G4"}`, "invalid \\u escape", "/s"},
		{"bad escape", `{"s":"\x"}`, "invalid escape", "/s"},
		{"control character", "{\"s\":\"a\nb\"}", "control character", "/s"},
		{"unterminated string", `{"s":"abc`, "unterminated", "/s"},
		{"comment", `{"a":1 /* c */}`, "not JSON", "/a"},
		{"array error path", `{"a":[1,2,x]}`, "not JSON", "/a/2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := som.Parse([]byte(tc.body))
			if err == nil {
				t.Fatalf("Parse accepted %q: %+v", tc.body, m.Doc)
			}
			var pe *som.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v, want *som.ParseError", err, err)
			}
			if !strings.Contains(pe.Msg, tc.msg) {
				t.Errorf("message %q, want it to contain %q", pe.Msg, tc.msg)
			}
			if pe.Path != tc.path {
				t.Errorf("path %q, want %q", pe.Path, tc.path)
			}
			if pe.Offset < 0 || pe.Offset > len(tc.body) {
				t.Errorf("offset %d outside the body", pe.Offset)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	for _, body := range []string{
		`{}`,
		" \r\n\t{ } \n",
		nested(som.MaxDepth),
		`{"a":[],"b":{},"c":[{}],"d":null,"e":true,"f":false}`,
		`{"n":[0,-0,1,-1,1.5,1e3,1E-3,-2.5e+10,123456789012345678901234567890,1.7976931348623157e308,5e-324,0e-999999,0.0]}`,
		`{"s":"plain","e":"\"\\\/\b\f\n\r\t","u":"\u00e9\u20AC\ud83d\ude00","raw":"café €😀","empty":""}`,
		`{"":1,"a b":2,"a/b~c":3}`,
		`{"a":1,"A":2}`,
		`{"x":{"a":1},"y":{"a":1}}`,
	} {
		t.Run(body, func(t *testing.T) {
			m := parse(t, []byte(body))
			var want map[string]any
			d := json.NewDecoder(strings.NewReader(body))
			d.UseNumber()
			if err := d.Decode(&want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m.Doc, want) {
				t.Errorf("Doc = %#v, want %#v", m.Doc, want)
			}
			if string(m.Raw) != body {
				t.Errorf("Raw = %q, want the body", m.Raw)
			}
		})
	}
}

func TestParseTypedFields(t *testing.T) {
	ctx := storyContext()
	payload(ctx)["state"] = "ready"
	payload(ctx)["sequence_number"] = json.Number("12.0")
	ev := storyEvent()
	asset := assetReference()
	for _, tc := range []struct {
		name string
		doc  map[string]any
		want som.Message
	}{
		{"story.context", ctx, som.Message{MessageID: "0b7f3c1e-8d2a-4c5e-9f1a-2b3c4d5e6f70", MessageType: "story.context",
			SystemID: "cms-main", Family: "story-context", StoryID: "story-123", State: "ready", SequenceNumber: 12}},
		{"story.event", ev, som.Message{MessageID: "6a1d2b3c-4e5f-4a6b-8c7d-9e0f1a2b3c4d", MessageType: "story.event",
			SystemID: "cms-main", Family: "story-event", StoryID: "story-123"}},
		{"asset.reference", asset, som.Message{MessageID: "f47ac10b-58cc-4372-a567-0e02b2c3d479", MessageType: "asset.reference",
			SystemID: "media-manager", Family: "asset-reference"}},
		{"wrong types", map[string]any{"message_id": 1, "message_type": "story.context", "payload": map[string]any{"story_id": 2, "sequence_number": 1.5, "state": true}},
			som.Message{MessageType: "story.context", Family: "story-context"}},
		{"unknown type", map[string]any{"message_type": "story.other", "payload": map[string]any{"story_id": "s"}},
			som.Message{MessageType: "story.other"}},
		{"payload not an object", map[string]any{"message_type": "story.context", "payload": []any{}},
			som.Message{MessageType: "story.context", Family: "story-context"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := parse(t, encode(t, tc.doc))
			m.Raw, m.Doc = nil, nil
			if !reflect.DeepEqual(*m, tc.want) {
				t.Errorf("got %+v, want %+v", *m, tc.want)
			}
		})
	}
}

func TestFamilyOf(t *testing.T) {
	for typ, want := range map[string]string{
		"story.context": "story-context", "story.event": "story-event", "asset.reference": "asset-reference",
		"story-context": "", "": "", "Story.Context": "",
	} {
		got, ok := som.FamilyOf(typ)
		if got != want || ok != (want != "") {
			t.Errorf("FamilyOf(%q) = %q, %v; want %q", typ, got, ok, want)
		}
	}
}

// TestParseStringsShareTheBody checks that a string without escapes costs
// no allocation of its own, whether ASCII or not: a body of many such
// strings parses with as many allocations as a body of one (the map and the
// interfaces aside), and only an escape costs a copy.
func TestParseStringsShareTheBody(t *testing.T) {
	allocs := func(body string) float64 {
		b := []byte(body)
		return testing.AllocsPerRun(100, func() {
			if _, err := som.Parse(b); err != nil {
				t.Fatal(err)
			}
		})
	}
	one := allocs(`{"headline":"Council approves budget"}`)
	for _, body := range []string{
		`{"headline":"Council approves the city budget after a late-night session on housing and transport"}`,
		`{"headline":"Le conseil adopte le budget – après une séance tardive, «enfin»"}`,
		`{"headline":"市议会通过预算 🏛"}`,
	} {
		if n := allocs(body); n != one {
			t.Errorf("%d allocations for %s, want %d as for one short ASCII string", int(n), body, int(one))
		}
	}
	if n := allocs(`{"headline":"Council \"approves\" budget"}`); n != one+1 {
		t.Errorf("%d allocations for a string with escapes, want %d: one copy for the unescaped text", int(n), int(one+1))
	}
}
