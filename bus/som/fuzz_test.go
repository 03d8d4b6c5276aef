package som_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/rules"
)

// FuzzParseValidate feeds arbitrary bodies through Parse, Validate and
// ContentHash. Nothing may panic; Parse must agree with encoding/json on
// what it accepts and refuse only for its documented strict reasons;
// ContentHash must equal SHA-256 of the jcs package's canonical form of the
// body; every violation must be catalogued and located by a JSON Pointer.
func FuzzParseValidate(f *testing.F) {
	f.Add(typicalStory())
	for _, tc := range validateCases {
		doc := tc.base()
		if tc.mutate != nil {
			tc.mutate(doc, payload(doc))
		}
		f.Add(encode(f, doc))
	}
	for _, s := range []string{
		``, ` `, `[]`, `"x"`, `1`, `null`, `{}`, `{} {}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`,
		`{"a":1e400}`, `{"a":1e-400}`, `{"a":-0}`, "{\"a\":\"\xff\"}", `{"a":"\ud800"}`, `{"a":"\ud83d\ude00"}`,
		nested(som.MaxDepth), nested(som.MaxDepth + 1), `{"a/b~c":1}`, `{"message_type":"story.context","payload":{}}`,
		`{"message_type":"asset.reference","payload":{"rights":{"expires_at":"x"}}}`,
		`{"message_type":"story.event","payload":{"details":{"a":[1,{"b":null}]}}}`,
		`{"\ue000":1,"\ud83d\ude00":[1.0,1e21,-0,1e-7],"\u2028":"\u001f\/\u00e9"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := som.Parse(body)
		if err != nil {
			checkParseError(t, body, err)
			return
		}
		var want map[string]any
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if err := d.Decode(&want); err != nil {
			t.Fatalf("Parse accepted what encoding/json refuses (%v): %q", err, body)
		}
		if !reflect.DeepEqual(m.Doc, want) {
			t.Fatalf("Parse and encoding/json disagree on %q:\n%#v\n%#v", body, m.Doc, want)
		}
		h, err := m.ContentHash()
		if err != nil {
			t.Fatalf("ContentHash of an accepted message: %v: %q", err, body)
		}
		if h != jcsHash(t, body) {
			t.Fatalf("ContentHash differs from SHA-256 of the jcs form of %q", body)
		}
		if _, err := som.QuickAgrees(m); err != nil {
			t.Fatalf("%v: %q", err, body)
		}
		refusals, warnings := som.Validate(m)
		for _, v := range slices.Concat(refusals, warnings) {
			r, ok := rules.Lookup(v.Rule)
			if !ok {
				t.Fatalf("rule %q is not catalogued: %+v", v.Rule, v)
			}
			if v.Source != r.Source {
				t.Fatalf("%s: source %q, catalogue %q", v.Rule, v.Source, r.Source)
			}
			if v.Path != "" && !strings.HasPrefix(v.Path, "/") {
				t.Fatalf("%s: path %q is not a JSON Pointer", v.Rule, v.Path)
			}
			if v.Message == "" {
				t.Fatalf("%s: empty message", v.Rule)
			}
		}
		for _, v := range refusals {
			if r, _ := rules.Lookup(v.Rule); r.Status != 400 {
				t.Fatalf("refusal %s: status %d", v.Rule, r.Status)
			}
		}
		for _, v := range warnings {
			if r, _ := rules.Lookup(v.Rule); !r.Warning {
				t.Fatalf("warning %s is not a warning", v.Rule)
			}
		}
		again, _ := som.Validate(m)
		if !reflect.DeepEqual(again, refusals) {
			t.Fatalf("Validate is not deterministic:\n%+v\n%+v", refusals, again)
		}
	})
}

func checkParseError(t *testing.T, body []byte, err error) {
	t.Helper()
	var pe *som.ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("Parse error %T, want *som.ParseError", err)
	}
	if pe.Msg == "" || pe.Offset < 0 || pe.Offset > len(body) {
		t.Fatalf("bad ParseError %+v for %q", pe, body)
	}
	if pe.Path != "" && !strings.HasPrefix(pe.Path, "/") {
		t.Fatalf("ParseError path %q is not a JSON Pointer", pe.Path)
	}
	// Where encoding/json accepts an object, Parse may refuse it only for
	// its strict rules.
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); json.Valid(body) && len(trimmed) > 0 && trimmed[0] == '{' {
		for _, reason := range []string{"duplicate member name", "deeper than", "IEEE 754", "not UTF-8"} {
			if strings.Contains(pe.Msg, reason) {
				return
			}
		}
		t.Fatalf("Parse refused valid JSON %q: %v", body, err)
	}
}
