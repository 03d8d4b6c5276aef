package som_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/rules"
)

// Schema keywords that can fail validation, each giving the rule
// <schema>.<keyword>; format gives <schema>.format.<format>.
var assertionKeywords = map[string]bool{
	"type": true, "enum": true, "const": true, "required": true, "pattern": true,
	"minLength": true, "maxLength": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true,
	"minItems": true, "maxItems": true, "uniqueItems": true,
	"minProperties": true, "maxProperties": true,
}

// Keywords that never fail on their own.
var annotationKeywords = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "title": true, "description": true,
	"examples": true, "default": true,
}

// ruleIDs returns every rule id a schema can produce, walking its keywords.
// A keyword it does not know fails the test, so a schema change cannot add
// a rule behind the catalogue's back.
func ruleIDs(t *testing.T, name string, schema map[string]any) []string {
	ids := map[string]bool{}
	var walk func(ptr string, s map[string]any)
	walk = func(ptr string, s map[string]any) {
		for kw, v := range s {
			switch {
			case assertionKeywords[kw]:
				ids[name+"."+kw] = true
			case annotationKeywords[kw]:
			case kw == "format":
				ids[name+".format."+v.(string)] = true
			case kw == "properties":
				for prop, sub := range v.(map[string]any) {
					walk(ptr+"/properties/"+prop, sub.(map[string]any))
				}
			case kw == "items":
				walk(ptr+"/items", v.(map[string]any))
			case kw == "additionalProperties":
				switch v := v.(type) {
				case bool:
					if !v {
						ids[name+".additionalProperties"] = true
					}
				case map[string]any:
					walk(ptr+"/additionalProperties", v)
				}
			default:
				t.Errorf("%s#%s: keyword %q is not handled by this test or by Validate's rule naming", name, ptr, kw)
			}
		}
	}
	walk("", schema)
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// TestCatalogueCoversSchemas checks every rule id the embedded schemas can
// produce is in the rule catalogue, and every schema rule in the catalogue
// can be produced.
func TestCatalogueCoversSchemas(t *testing.T) {
	schemas := som.Schemas()
	if len(schemas) != 4 {
		t.Fatalf("%d schemas, want 4", len(schemas))
	}
	producible := map[string]bool{}
	for name, raw := range schemas {
		var schema map[string]any
		if err := json.Unmarshal(raw, &schema); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if id, want := schema["$id"], "https://schemas.storybus.io/som/1.0/"+name+".json"; id != want {
			t.Errorf("%s: $id %v, want %s", name, id, want)
		}
		if schema["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema %v, want draft 2020-12", name, schema["$schema"])
		}
		for _, id := range ruleIDs(t, name, schema) {
			producible[id] = true
			r, ok := rules.Lookup(id)
			if !ok {
				t.Errorf("%s can produce %s, which the rule catalogue lacks", name, id)
				continue
			}
			if r.Source != rules.SourceSchema || r.Status != 400 || r.Stage != 8 || r.Retry != "No" || r.Meaning == "" || r.Fix == "" {
				t.Errorf("catalogue entry %+v: want source schema, status 400, stage 8, retry No, a meaning and a fix", r)
			}
		}
	}
	for _, r := range rules.All() {
		if r.Source == rules.SourceSchema && !producible[r.ID] {
			t.Errorf("catalogue has %s, which no schema can produce", r.ID)
		}
	}
}

func TestCatalogueConformance(t *testing.T) {
	for _, id := range []string{
		rules.ConformanceKillReason, rules.ConformancePublishedHeadline,
		rules.ConformanceEmbargoPast, rules.ConformanceKillReasonUnused, rules.ConformanceRightsExpired,
	} {
		r, ok := rules.Lookup(id)
		if !ok {
			t.Errorf("%s is not catalogued", id)
			continue
		}
		if r.Source != rules.SourceConformance || r.Stage != 8 || r.Meaning == "" || r.Fix == "" {
			t.Errorf("%+v: want source conformance, stage 8, a meaning and a fix", r)
		}
		if r.Warning == (r.Status != 0) {
			t.Errorf("%s: a conformance rule is either a 400 refusal or a warning: %+v", id, r)
		}
		if strings.HasSuffix(id, "kill_reason") || strings.HasSuffix(id, "published_headline") {
			if r.Status != 400 {
				t.Errorf("%s: status %d, want 400", id, r.Status)
			}
		}
	}
}

// TestDocsMatchEmbedded checks docs/som/ publishes exactly the embedded
// schemas.
func TestDocsMatchEmbedded(t *testing.T) {
	dir := filepath.Join("..", "..", "docs", "som")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	schemas := som.Schemas()
	var want []string
	for name := range schemas {
		want = append(want, name)
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("docs/som has %v, want %v", names, want)
	}
	for name, embedded := range schemas {
		doc, err := os.ReadFile(filepath.Join(dir, name+".json"))
		if err != nil {
			t.Error(err)
			continue
		}
		if !bytes.Equal(doc, embedded) {
			t.Errorf("docs/som/%s.json differs from the embedded schema: copy bus/som/schemas/%s.json", name, name)
		}
	}
}
