package docs_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/storybus/storybus/docs"
)

// document returns the description as generic JSON values.
func document(t *testing.T) map[string]any {
	t.Helper()
	b, err := yaml.YAMLToJSON(docs.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// somSchema returns one of the SOM 1.0 schemas beside the description.
func somSchema(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := fs.ReadFile(docs.Files(), "som/"+name+".json")
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// resolve returns v with every reference to a component schema replaced by
// that schema, resolved in turn.
func resolve(t *testing.T, schemas map[string]any, v any) any {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			name, ok := strings.CutPrefix(ref, "#/components/schemas/")
			if !ok || schemas[name] == nil || len(v) != 1 {
				t.Fatalf("a message schema refers to %q (with %d members): only to a component schema, alone", ref, len(v))
			}
			return resolve(t, schemas, schemas[name])
		}
		out := map[string]any{}
		for k, e := range v {
			out[k] = resolve(t, schemas, e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = resolve(t, schemas, e)
		}
		return out
	}
	return v
}

// validation returns what of schema v decides validation, in one spelling:
// annotations dropped, a single-value enum as const, no type beside an
// enum or const of strings (the enum decides alone), no
// additionalProperties: true (the default).
func validation(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			switch k {
			case "description", "title", "$schema", "$id", "examples":
				continue
			}
			out[k] = validation(e)
		}
		if ap, ok := out["additionalProperties"].(bool); ok && ap {
			delete(out, "additionalProperties")
		}
		if enum, ok := out["enum"].([]any); ok && len(enum) == 1 {
			out["const"] = enum[0]
			delete(out, "enum")
		}
		values, _ := out["enum"].([]any)
		if c, ok := out["const"]; ok {
			values = []any{c}
		}
		if out["type"] == "string" && len(values) > 0 && !slices.ContainsFunc(values, func(e any) bool { _, s := e.(string); return !s }) {
			delete(out, "type")
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = validation(e)
		}
		return out
	}
	return v
}

// diff says where two schemas differ, or "".
func diff(path string, got, want any) string {
	gm, gok := got.(map[string]any)
	wm, wok := want.(map[string]any)
	if gok && wok {
		keys := map[string]bool{}
		for k := range gm {
			keys[k] = true
		}
		for k := range wm {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if d := diff(path+"/"+k, gm[k], wm[k]); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		return fmt.Sprintf("at %s: the description has %s, the SOM schema %s", path, g, w)
	}
	return ""
}

// TestMessageSchemasRestateSOM: SOMMessage is a oneOf of the three
// families with a discriminator on message_type, and each family's message
// schema accepts exactly what the SOM 1.0 schemas the bus validates with
// accept: the envelope with that message_type, and the family's payload.
func TestMessageSchemasRestateSOM(t *testing.T) {
	doc := document(t)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	envelope := somSchema(t, "envelope")
	families := map[string]struct{ schema, file string }{
		"story.context":   {"StoryContextMessage", "story-context"},
		"story.event":     {"StoryEventMessage", "story-event"},
		"asset.reference": {"AssetReferenceMessage", "asset-reference"},
	}
	types := envelope["properties"].(map[string]any)["message_type"].(map[string]any)["enum"].([]any)
	if len(types) != len(families) {
		t.Fatalf("the envelope names %d message types, the test knows %d", len(types), len(families))
	}

	msg := schemas["SOMMessage"].(map[string]any)
	var oneOf []string
	for _, v := range msg["oneOf"].([]any) {
		oneOf = append(oneOf, v.(map[string]any)["$ref"].(string))
	}
	disc, _ := msg["discriminator"].(map[string]any)
	if disc["propertyName"] != "message_type" {
		t.Errorf("SOMMessage's discriminator is %v, want one on message_type", disc)
	}
	mapping, _ := disc["mapping"].(map[string]any)
	if len(mapping) != len(types) || len(oneOf) != len(types) {
		t.Errorf("SOMMessage: %d variants, %d mapped, want %d", len(oneOf), len(mapping), len(types))
	}
	for k := range msg {
		if k != "description" && k != "oneOf" && k != "discriminator" {
			t.Errorf("SOMMessage has %q: only its variants decide", k)
		}
	}

	for _, mt := range types {
		f := families[mt.(string)]
		ref := "#/components/schemas/" + f.schema
		if mapping[mt.(string)] != ref || !slices.Contains(oneOf, ref) {
			t.Errorf("SOMMessage: message_type %s does not map to %s among its variants", mt, ref)
		}
		variant := validation(resolve(t, schemas, schemas[f.schema])).(map[string]any)
		props := variant["properties"].(map[string]any)
		if d := diff("/properties/message_type", props["message_type"], map[string]any{"const": mt}); d != "" {
			t.Errorf("%s: message_type is not %s alone: %s", f.schema, mt, d)
		}
		if d := diff("/properties/payload", props["payload"], validation(somSchema(t, f.file))); d != "" {
			t.Errorf("%s's payload differs from som/%s.json %s", f.schema, f.file, d)
		}
		// The rest is the envelope's.
		want := validation(envelope).(map[string]any)
		wantProps := want["properties"].(map[string]any)
		props["message_type"], props["payload"] = wantProps["message_type"], wantProps["payload"]
		if d := diff("", variant, want); d != "" {
			t.Errorf("%s differs from som/envelope.json %s", f.schema, d)
		}
	}
}

// TestValidationSpellingCatchesDrift: the comparison above is not blind to
// a changed bound, a dropped member or a widened enum.
func TestValidationSpellingCatchesDrift(t *testing.T) {
	som := validation(somSchema(t, "story-context"))
	for _, change := range []func(m map[string]any){
		func(m map[string]any) {
			m["properties"].(map[string]any)["headline"].(map[string]any)["maxLength"] = 1001.0
		},
		func(m map[string]any) { delete(m["properties"].(map[string]any), "slug") },
		func(m map[string]any) {
			m["properties"].(map[string]any)["state"].(map[string]any)["enum"] = []any{"draft"}
		},
		func(m map[string]any) { m["required"] = []any{"story_id"} },
		func(m map[string]any) { m["additionalProperties"] = true },
	} {
		changed := validation(somSchema(t, "story-context")).(map[string]any)
		change(changed)
		if diff("", validation(changed), som) == "" {
			t.Errorf("a changed schema compares equal: %v", changed)
		}
	}
}

// TestDescriptionSuitsGenerators: nothing in the description makes
// openapi-typescript or oapi-codegen give up on a type: no const (oapi-codegen
// types it interface{}; a single-value enum gives both a typed constant), no
// enum without its type, and no object without properties that leaves
// additionalProperties unsaid (openapi-typescript's Record<string, never>).
// make test-openapi-generators runs both generators on it.
func TestDescriptionSuitsGenerators(t *testing.T) {
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["const"]; ok {
				t.Errorf("%s: const: use a single-value enum with its type", path)
			}
			if _, ok := v["enum"]; ok && v["type"] == nil {
				t.Errorf("%s: an enum without its type", path)
			}
			if v["type"] == "object" && v["properties"] == nil && v["additionalProperties"] == nil {
				t.Errorf("%s: an object without properties says nothing of additionalProperties", path)
			}
			for k, e := range v {
				walk(path+"/"+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s/%d", path, i), e)
			}
		}
	}
	walk("", document(t))
}
