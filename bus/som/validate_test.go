package som_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/rules"
)

// want is a violation by rule and path; the source comes from the catalogue.
type want struct{ rule, path string }

func (w want) String() string { return w.rule + " at " + w.path }

func got(vs []rules.Violation) []want {
	out := make([]want, 0, len(vs))
	for _, v := range vs {
		out = append(out, want{v.Rule, v.Path})
	}
	return out
}

type validateCase struct {
	name     string
	base     func() map[string]any
	mutate   func(doc, payload map[string]any)
	refusals []want
	warnings []want
}

func many(n int, v any) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// validateCases exercise every schema and conformance rule at least once.
var validateCases = []validateCase{
	// Valid messages.
	{name: "valid story.context", base: storyContext},
	{name: "valid story.event", base: storyEvent},
	{name: "valid asset.reference", base: assetReference},
	{name: "valid typical story", base: func() map[string]any {
		var doc map[string]any
		if err := json.Unmarshal(typicalStory(), &doc); err != nil {
			panic(err)
		}
		return doc
	}},
	{name: "valid with correlation_id and optional members", base: storyContext, mutate: func(d, p map[string]any) {
		d["correlation_id"] = "0B7F3C1E-8D2A-4C5E-9F1A-2B3C4D5E6F71"
		d["timestamp"] = "2024-05-01t12:00:00.123+02:00"
		p["sequence_number"] = json.Number("2.0")
		p["language"] = "sr-Latn-RS"
		p["assets"] = []any{map[string]any{"ref": "urn:uuid:0b7f3c1e-8d2a-4c5e-9f1a-2b3c4d5e6f70", "kind": "graphic"}}
		p["embargo_until"] = "2024-05-01T12:00:00Z"
	}},

	// envelope
	{name: "envelope additionalProperties", base: storyContext, mutate: func(d, p map[string]any) { d["extra"] = 1 },
		refusals: []want{{"envelope.additionalProperties", "/extra"}}},
	{name: "envelope const", base: storyContext, mutate: func(d, p map[string]any) { d["som_version"] = 1.0 },
		refusals: []want{{"envelope.const", "/som_version"}}},
	{name: "envelope enum skips the payload", base: storyContext, mutate: func(d, p map[string]any) {
		d["message_type"] = "story.other"
		delete(p, "story_id")
	}, refusals: []want{{"envelope.enum", "/message_type"}}},
	{name: "envelope format.date-time", base: storyContext, mutate: func(d, p map[string]any) { d["timestamp"] = "2024-05-01 12:00" },
		refusals: []want{{"envelope.format.date-time", "/timestamp"}}},
	{name: "envelope format.uuid", base: storyContext, mutate: func(d, p map[string]any) { d["correlation_id"] = "0b7f3c1e8d2a4c5e9f1a2b3c4d5e6f70" },
		refusals: []want{{"envelope.format.uuid", "/correlation_id"}}},
	{name: "envelope pattern", base: storyContext, mutate: func(d, p map[string]any) { d["system_id"] = "CMS" },
		refusals: []want{{"envelope.pattern", "/system_id"}}},
	{name: "envelope required at the root", base: storyContext, mutate: func(d, p map[string]any) { delete(d, "timestamp"); delete(d, "som_version") },
		refusals: []want{{"envelope.required", ""}, {"envelope.required", ""}}},
	{name: "envelope required payload", base: storyContext, mutate: func(d, p map[string]any) { delete(d, "payload") },
		refusals: []want{{"envelope.required", ""}}},
	{name: "envelope type", base: storyContext, mutate: func(d, p map[string]any) { d["message_id"] = 42 },
		refusals: []want{{"envelope.type", "/message_id"}}},
	{name: "envelope type payload skips the family", base: storyContext, mutate: func(d, p map[string]any) { d["payload"] = []any{} },
		refusals: []want{{"envelope.type", "/payload"}}},

	// story-context
	{name: "story-context additionalProperties", base: storyContext, mutate: func(d, p map[string]any) { p["body"] = "inline text" },
		refusals: []want{{"story-context.additionalProperties", "/payload/body"}}},
	{name: "story-context additionalProperties in an asset", base: storyContext, mutate: func(d, p map[string]any) {
		p["assets"] = []any{map[string]any{"ref": "https://m.example/1", "kind": "image", "width": 100}}
	}, refusals: []want{{"story-context.additionalProperties", "/payload/assets/0/width"}}},
	{name: "story-context enum state", base: storyContext, mutate: func(d, p map[string]any) { p["state"] = "live" },
		refusals: []want{{"story-context.enum", "/payload/state"}}},
	{name: "story-context enum asset kind", base: storyContext, mutate: func(d, p map[string]any) {
		p["assets"] = []any{map[string]any{"ref": "https://m.example/1", "kind": "photo"}}
	}, refusals: []want{{"story-context.enum", "/payload/assets/0/kind"}}},
	{name: "story-context format.date-time", base: storyContext, mutate: func(d, p map[string]any) { p["embargo_until"] = "tomorrow" },
		refusals: []want{{"story-context.format.date-time", "/payload/embargo_until"}}},
	{name: "story-context format.uri", base: storyContext, mutate: func(d, p map[string]any) {
		p["body_ref"] = "/stories/1/body"
		p["assets"] = []any{map[string]any{"ref": "https://m.example/1", "kind": "image"}, map[string]any{"ref": "photo.jpg", "kind": "image"}}
	}, refusals: []want{{"story-context.format.uri", "/payload/assets/1/ref"}, {"story-context.format.uri", "/payload/body_ref"}}},
	{name: "story-context maxItems", base: storyContext, mutate: func(d, p map[string]any) { p["labels"] = many(101, "x") },
		refusals: []want{{"story-context.maxItems", "/payload/labels"}}},
	{name: "story-context maxLength", base: storyContext, mutate: func(d, p map[string]any) { p["headline"] = strings.Repeat("é", 1001) },
		refusals: []want{{"story-context.maxLength", "/payload/headline"}}},
	{name: "story-context maximum", base: storyContext, mutate: func(d, p map[string]any) { p["sequence_number"] = json.Number("9007199254740992") },
		refusals: []want{{"story-context.maximum", "/payload/sequence_number"}}},
	{name: "story-context minLength", base: storyContext, mutate: func(d, p map[string]any) { p["authors"] = []any{"Ada", ""} },
		refusals: []want{{"story-context.minLength", "/payload/authors/1"}}},
	{name: "story-context minimum", base: storyContext, mutate: func(d, p map[string]any) { p["sequence_number"] = 0 },
		refusals: []want{{"story-context.minimum", "/payload/sequence_number"}}},
	{name: "story-context pattern", base: storyContext, mutate: func(d, p map[string]any) {
		p["story_id"] = "story 123"
		p["language"] = "english!"
	}, refusals: []want{{"story-context.pattern", "/payload/language"}, {"story-context.pattern", "/payload/story_id"}}},
	{name: "story-context required in an asset", base: storyContext, mutate: func(d, p map[string]any) {
		p["assets"] = []any{map[string]any{"caption": "no ref, no kind"}}
	}, refusals: []want{{"story-context.required", "/payload/assets/0"}, {"story-context.required", "/payload/assets/0"}}},
	{name: "story-context type", base: storyContext, mutate: func(d, p map[string]any) {
		p["sequence_number"] = 1.5
		p["authors"] = "Ada"
	}, refusals: []want{{"story-context.type", "/payload/authors"}, {"story-context.type", "/payload/sequence_number"}}},

	// story-event
	{name: "story-event additionalProperties", base: storyEvent, mutate: func(d, p map[string]any) { p["state"] = "published" },
		refusals: []want{{"story-event.additionalProperties", "/payload/state"}}},
	{name: "story-event enum", base: storyEvent, mutate: func(d, p map[string]any) { p["event"] = "deleted" },
		refusals: []want{{"story-event.enum", "/payload/event"}}},
	{name: "story-event format.date-time", base: storyEvent, mutate: func(d, p map[string]any) { p["occurred_at"] = "2024-13-01T00:00:00Z" },
		refusals: []want{{"story-event.format.date-time", "/payload/occurred_at"}}},
	{name: "story-event maxProperties", base: storyEvent, mutate: func(d, p map[string]any) {
		details := map[string]any{}
		for i := range 65 {
			details[fmt.Sprint("k", i)] = i
		}
		p["details"] = details
	}, refusals: []want{{"story-event.maxProperties", "/payload/details"}}},
	{name: "story-event pattern", base: storyEvent, mutate: func(d, p map[string]any) { p["story_id"] = strings.Repeat("s", 129) },
		refusals: []want{{"story-event.pattern", "/payload/story_id"}}},
	{name: "story-event required", base: storyEvent, mutate: func(d, p map[string]any) { delete(p, "occurred_at") },
		refusals: []want{{"story-event.required", "/payload"}}},
	{name: "story-event type", base: storyEvent, mutate: func(d, p map[string]any) { p["details"] = "corrected a typo" },
		refusals: []want{{"story-event.type", "/payload/details"}}},
	{name: "story-event details are free-form", base: storyEvent, mutate: func(d, p map[string]any) {
		p["details"] = map[string]any{"note": "corrected a typo", "fields": []any{"headline"}}
	}},

	// asset-reference
	{name: "asset-reference additionalProperties in rights", base: assetReference, mutate: func(d, p map[string]any) {
		p["rights"].(map[string]any)["holder"] = "Agency"
	}, refusals: []want{{"asset-reference.additionalProperties", "/payload/rights/holder"}}},
	{name: "asset-reference enum", base: assetReference, mutate: func(d, p map[string]any) { p["kind"] = "photo" },
		refusals: []want{{"asset-reference.enum", "/payload/kind"}}},
	{name: "asset-reference format.date-time", base: assetReference, mutate: func(d, p map[string]any) {
		p["rights"].(map[string]any)["expires_at"] = "2025-05-01"
	}, refusals: []want{{"asset-reference.format.date-time", "/payload/rights/expires_at"}}},
	{name: "asset-reference format.uri", base: assetReference, mutate: func(d, p map[string]any) { p["ref"] = "assets/42" },
		refusals: []want{{"asset-reference.format.uri", "/payload/ref"}}},
	{name: "asset-reference maxItems", base: assetReference, mutate: func(d, p map[string]any) { p["story_ids"] = many(101, "s") },
		refusals: []want{{"asset-reference.maxItems", "/payload/story_ids"}}},
	{name: "asset-reference maxLength", base: assetReference, mutate: func(d, p map[string]any) {
		p["rights"].(map[string]any)["usage"] = strings.Repeat("u", 1001)
	}, refusals: []want{{"asset-reference.maxLength", "/payload/rights/usage"}}},
	{name: "asset-reference pattern", base: assetReference, mutate: func(d, p map[string]any) { p["story_ids"] = []any{"ok", "not ok"} },
		refusals: []want{{"asset-reference.pattern", "/payload/story_ids/1"}}},
	{name: "asset-reference required", base: assetReference, mutate: func(d, p map[string]any) { delete(p, "asset_id") },
		refusals: []want{{"asset-reference.required", "/payload"}}},
	{name: "asset-reference type", base: assetReference, mutate: func(d, p map[string]any) { p["story_ids"] = "story-123" },
		refusals: []want{{"asset-reference.type", "/payload/story_ids"}}},

	// conformance
	{name: "conformance kill_reason missing", base: storyContext, mutate: func(d, p map[string]any) { p["state"] = "killed" },
		refusals: []want{{"conformance.kill_reason", "/payload"}}},
	{name: "conformance kill_reason blank", base: storyContext, mutate: func(d, p map[string]any) {
		p["state"] = "killed"
		p["kill_reason"] = " \t"
	}, refusals: []want{{"conformance.kill_reason", "/payload/kill_reason"}}},
	{name: "killed with a kill_reason", base: storyContext, mutate: func(d, p map[string]any) {
		p["state"] = "killed"
		p["kill_reason"] = "Legal"
	}},
	{name: "conformance kill_reason defers to the schema", base: storyContext, mutate: func(d, p map[string]any) {
		p["state"] = "killed"
		p["kill_reason"] = 5
	}, refusals: []want{{"story-context.type", "/payload/kill_reason"}}},
	{name: "conformance published_headline", base: storyContext, mutate: func(d, p map[string]any) {
		p["state"] = "published"
		p["headline"] = "\u00a0 "
	}, refusals: []want{{"conformance.published_headline", "/payload/headline"}}},
	{name: "conformance published_headline updated", base: storyContext, mutate: func(d, p map[string]any) {
		p["state"] = "updated"
		p["headline"] = ""
	}, refusals: []want{{"conformance.published_headline", "/payload/headline"}}},
	{name: "draft with a blank headline", base: storyContext, mutate: func(d, p map[string]any) { p["headline"] = "" }},
	{name: "missing headline is the schema's", base: storyContext, mutate: func(d, p map[string]any) {
		p["state"] = "published"
		delete(p, "headline")
	}, refusals: []want{{"story-context.required", "/payload"}}},
	{name: "conformance runs beside envelope violations", base: storyContext, mutate: func(d, p map[string]any) {
		d["message_id"] = "x"
		p["state"] = "killed"
	}, refusals: []want{{"envelope.format.uuid", "/message_id"}, {"conformance.kill_reason", "/payload"}}},
	{name: "conformance embargo_past", base: storyContext, mutate: func(d, p map[string]any) { p["embargo_until"] = "2024-05-01T13:59:59+02:00" },
		warnings: []want{{"conformance.embargo_past", "/payload/embargo_until"}}},
	{name: "embargo in the future", base: storyContext, mutate: func(d, p map[string]any) { p["embargo_until"] = "2024-05-01T14:00:01+02:00" }},
	{name: "embargo_past needs a valid timestamp", base: storyContext, mutate: func(d, p map[string]any) {
		p["embargo_until"] = "2000-01-01T00:00:00Z"
		d["timestamp"] = "later"
	}, refusals: []want{{"envelope.format.date-time", "/timestamp"}}},
	{name: "conformance kill_reason_unused", base: storyContext, mutate: func(d, p map[string]any) { p["kill_reason"] = "Legal" },
		warnings: []want{{"conformance.kill_reason_unused", "/payload/kill_reason"}}},
	{name: "conformance rights_expired", base: assetReference, mutate: func(d, p map[string]any) {
		p["rights"].(map[string]any)["expires_at"] = "2024-04-30T23:59:59Z"
	}, warnings: []want{{"conformance.rights_expired", "/payload/rights/expires_at"}}},
	{name: "warnings and refusals together", base: storyContext, mutate: func(d, p map[string]any) {
		p["state"] = "published"
		p["headline"] = ""
		p["kill_reason"] = "Legal"
		p["embargo_until"] = "2024-01-01T00:00:00Z"
	}, refusals: []want{{"conformance.published_headline", "/payload/headline"}},
		warnings: []want{{"conformance.embargo_past", "/payload/embargo_until"}, {"conformance.kill_reason_unused", "/payload/kill_reason"}}},
}

func TestValidate(t *testing.T) {
	for _, tc := range validateCases {
		t.Run(tc.name, func(t *testing.T) {
			doc := tc.base()
			if tc.mutate != nil {
				tc.mutate(doc, payload(doc))
			}
			m := parse(t, encode(t, doc))
			if _, err := som.QuickAgrees(m); err != nil {
				t.Fatal(err)
			}
			refusals, warnings := som.Validate(m)
			if g := got(refusals); !slices.Equal(g, tc.refusals) {
				t.Errorf("refusals %v, want %v\n%+v", g, tc.refusals, refusals)
			}
			if g := got(warnings); !slices.Equal(g, tc.warnings) {
				t.Errorf("warnings %v, want %v\n%+v", g, tc.warnings, warnings)
			}
			for _, v := range slices.Concat(refusals, warnings) {
				r, ok := rules.Lookup(v.Rule)
				if !ok {
					t.Fatalf("%s is not in the rule catalogue", v.Rule)
				}
				if v.Source != r.Source {
					t.Errorf("%s: source %q, catalogue says %q", v.Rule, v.Source, r.Source)
				}
				if v.Message == "" {
					t.Errorf("%s: empty message", v.Rule)
				}
			}
			for _, v := range refusals {
				if r, _ := rules.Lookup(v.Rule); r.Status != 400 {
					t.Errorf("refusal %s has status %d, want 400", v.Rule, r.Status)
				}
			}
			for _, v := range warnings {
				if r, _ := rules.Lookup(v.Rule); !r.Warning {
					t.Errorf("warning %s is not a warning in the catalogue", v.Rule)
				}
			}
		})
	}
}

// TestValidateCasesCoverCatalogue checks the table above produces every SOM
// rule in the catalogue.
func TestValidateCasesCoverCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range validateCases {
		for _, w := range slices.Concat(tc.refusals, tc.warnings) {
			seen[w.rule] = true
		}
	}
	for _, r := range rules.All() {
		if r.Source != rules.SourceSchema && r.Source != rules.SourceConformance {
			continue
		}
		if !seen[r.ID] {
			t.Errorf("no test case produces %s", r.ID)
		}
	}
}

// TestValidateSeed is the refusal of "Handle the bus's answers", exactly.
func TestValidateSeed(t *testing.T) {
	doc := storyContext()
	doc["message_id"] = "not-a-uuid"
	delete(payload(doc), "story_id")
	refusals, warnings := som.Validate(parse(t, encode(t, doc)))
	wantRefusals := []rules.Violation{
		{Source: rules.SourceSchema, Rule: "envelope.format.uuid", Path: "/message_id", Message: "must be a valid uuid"},
		{Source: rules.SourceSchema, Rule: "story-context.required", Path: "/payload", Message: "must have required property 'story_id'"},
	}
	if !reflect.DeepEqual(refusals, wantRefusals) {
		t.Errorf("refusals\n%+v\nwant\n%+v", refusals, wantRefusals)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %+v, want none", warnings)
	}
	b, err := json.Marshal(refusals)
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `[{"source":"schema","rule":"envelope.format.uuid","message":"must be a valid uuid","path":"/message_id"},` +
		`{"source":"schema","rule":"story-context.required","message":"must have required property 'story_id'","path":"/payload"}]`
	if string(b) != wantJSON {
		t.Errorf("JSON\n%s\nwant\n%s", b, wantJSON)
	}
}

func TestValidateMessages(t *testing.T) {
	doc := storyContext()
	doc["som_version"] = "2.0"
	doc["system_id"] = "X"
	p := payload(doc)
	p["sequence_number"] = "1"
	p["state"] = "gone"
	p["headline"] = strings.Repeat("h", 1001)
	p["authors"] = []any{""}
	p["labels"] = many(101, "l")
	refusals, _ := som.Validate(parse(t, encode(t, doc)))
	var lines []string
	for _, v := range refusals {
		lines = append(lines, v.Rule+" "+v.Path+": "+v.Message)
	}
	want := []string{
		"story-context.minLength /payload/authors/0: must be at least 1 character long",
		"story-context.maxLength /payload/headline: must be at most 1000 characters long",
		"story-context.maxItems /payload/labels: must have at most 100 items",
		"story-context.type /payload/sequence_number: must be an integer",
		"story-context.enum /payload/state: must be one of 'draft', 'ready', 'published', 'updated', 'unpublished', 'killed'",
		"envelope.const /som_version: must be '1.0'",
		"envelope.pattern /system_id: must match pattern '^[a-z0-9][a-z0-9-]{1,62}$'",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestValidateOneViolationPerMissingProperty(t *testing.T) {
	doc := storyContext()
	doc["payload"] = map[string]any{}
	refusals, _ := som.Validate(parse(t, encode(t, doc)))
	var missing []string
	for _, v := range refusals {
		if v.Rule != "story-context.required" || v.Path != "/payload" {
			t.Errorf("unexpected %+v", v)
		}
		missing = append(missing, v.Message)
	}
	want := []string{
		"must have required property 'headline'",
		"must have required property 'sequence_number'",
		"must have required property 'state'",
		"must have required property 'story_id'",
	}
	if !slices.Equal(missing, want) {
		t.Errorf("got %q, want %q", missing, want)
	}
}

func TestValidatePathEscaping(t *testing.T) {
	doc := storyContext()
	doc["a/b~c"] = 1
	payload(doc)["~/"] = 1
	refusals, _ := som.Validate(parse(t, encode(t, doc)))
	want := []want{
		{"envelope.additionalProperties", "/a~1b~0c"},
		{"story-context.additionalProperties", "/payload/~0~1"},
	}
	if g := got(refusals); !slices.Equal(g, want) {
		t.Errorf("got %v, want %v", g, want)
	}
	if refusals[0].Message != "must not have additional property 'a/b~c'" {
		t.Errorf("message %q", refusals[0].Message)
	}
}

// TestValidateOrder checks the order is sorted and does not depend on map
// iteration, which the validator follows.
func TestValidateOrder(t *testing.T) {
	doc := storyContext()
	doc["message_id"] = "x"
	doc["z_extra"] = 1
	doc["a_extra"] = 1
	doc["m_extra"] = 1
	p := payload(doc)
	delete(p, "story_id")
	delete(p, "state")
	p["sequence_number"] = 0
	for _, k := range []string{"q", "b", "y", "c"} {
		p[k] = true
	}
	p["assets"] = []any{map[string]any{"x": 1, "w": 2}, map[string]any{}}
	body := encode(t, doc)
	first, _ := som.Validate(parse(t, body))
	if len(first) != 17 {
		t.Fatalf("%d violations, want 17: %+v", len(first), first)
	}
	if !slices.IsSortedFunc(first, func(a, b rules.Violation) int {
		return strings.Compare(a.Path+"\x00"+a.Rule+"\x00"+a.Message, b.Path+"\x00"+b.Rule+"\x00"+b.Message)
	}) {
		t.Errorf("not sorted by path, rule, message: %+v", first)
	}
	for range 50 {
		again, _ := som.Validate(parse(t, body))
		if !reflect.DeepEqual(again, first) {
			t.Fatalf("order changed:\n%+v\n%+v", first, again)
		}
	}
}

func TestValidateNilAndEmpty(t *testing.T) {
	for _, m := range []*som.Message{nil, {}, {Doc: map[string]any{}}} {
		refusals, warnings := som.Validate(m)
		if len(refusals) != 6 || len(warnings) != 0 {
			t.Errorf("Validate(%+v) = %+v, %+v; want the 6 required envelope members", m, refusals, warnings)
		}
	}
}

// TestQuickCheckConfirmsValidMessages: valid messages of every family, the
// typical snapshot among them, are confirmed by the quick schema check, so
// the full validator runs only for messages with something to report.
func TestQuickCheckConfirmsValidMessages(t *testing.T) {
	for name, body := range map[string][]byte{
		"story.context":   encode(t, storyContext()),
		"story.event":     encode(t, storyEvent()),
		"asset.reference": encode(t, assetReference()),
		"typical story":   typicalStory(),
	} {
		confirmed, err := som.QuickAgrees(parse(t, body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !confirmed {
			t.Errorf("%s: the quick check did not confirm a valid message", name)
		}
	}
}
