package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// valuesRow is a row of the README's values table: | `key` | `default` | … |
var valuesRow = regexp.MustCompile("^\\| `([^`]+)` \\| `([^`]*)` \\|")

// TestValuesTable checks that the README's values table has a row for every
// value of values.yaml, with its default, and no other rows. A value is a
// leaf of values.yaml, or a map whose schema has no properties (a free-form
// map such as nodeSelector).
func TestValuesTable(t *testing.T) {
	var values map[string]any
	readYAML(t, filepath.Join(chartDir, "values.yaml"), &values)
	var schema map[string]any
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	want := map[string]string{}
	var order []string
	var walk func(v any, node map[string]any, path []string)
	walk = func(v any, node map[string]any, path []string) {
		node = resolveRef(t, schema, node)
		props, _ := node["properties"].(map[string]any)
		if m, ok := v.(map[string]any); ok && props != nil {
			for k, sub := range m {
				p, ok := props[k].(map[string]any)
				if !ok {
					t.Errorf("values.yaml has %s, which values.schema.json does not describe", strings.Join(append(path, k), "."))
					continue
				}
				walk(sub, p, append(slices.Clone(path), k))
			}
			return
		}
		d, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		key := strings.Join(path, ".")
		want[key] = string(d)
		order = append(order, key)
	}
	walk(values, schema, nil)

	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		m := valuesRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := got[m[1]]; dup {
			t.Errorf("README.md describes %s twice", m[1])
		}
		got[m[1]] = m[2]
	}
	slices.Sort(order)
	for _, k := range order {
		d, ok := got[k]
		switch {
		case !ok:
			t.Errorf("README.md's values table lacks %s (default `%s`)", k, want[k])
		case d != want[k]:
			t.Errorf("README.md gives %s the default `%s`, values.yaml has `%s`", k, d, want[k])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("README.md describes %s, which is not in values.yaml", k)
		}
	}
}

// resolveRef follows a local $ref of the schema.
func resolveRef(t *testing.T, schema, node map[string]any) map[string]any {
	t.Helper()
	ref, ok := node["$ref"].(string)
	if !ok {
		return node
	}
	name, ok := strings.CutPrefix(ref, "#/definitions/")
	defs, _ := schema["definitions"].(map[string]any)
	def, found := defs[name].(map[string]any)
	if !ok || !found {
		t.Fatalf("values.schema.json: cannot resolve $ref %s", ref)
	}
	return def
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
