package charts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestNotesCommandsPaste renders the chart's NOTES and checks that every command in them works when pasted into a
// shell as it is: bash parses it without a complaint (an indented
// here-document end marker never ends the document), and run with a stand-in
// kubectl, every here-document hands kubectl whole YAML documents, no
// marker line among them.
func TestNotesCommandsPaste(t *testing.T) {
	for _, c := range []struct {
		name  string
		set   []string
		kinds []string
		// scope is the NOTES' sentence on what the operator reconciles;
		// ns the namespace their commands use.
		scope, ns string
	}{
		{"every namespace", nil, []string{"Tenant", "Connection", "Grant"},
			"It reconciles Tenants in every namespace.", "newsroom"},
		{"one namespace", []string{"--set", "watchNamespace=news"}, []string{"Tenant", "Connection", "Grant"},
			"It reconciles the Tenants of namespace news only.", "news"},
		{"namespaces", []string{"--set", "watchNamespaces={a,b}"}, []string{"Tenant", "Connection", "Grant"},
			"It reconciles the Tenants of namespaces a, b only.", "a"},
		{"namespaces and the older value", []string{"--set", "watchNamespaces={a,b}", "--set", "watchNamespace=c"}, []string{"Tenant", "Connection", "Grant"},
			"It reconciles the Tenants of namespaces a, b, c only.", "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			notes := renderNotes(t, c.set...)
			if !strings.Contains(notes, "\n"+c.scope+"\n") {
				t.Errorf("the NOTES do not say %q:\n%s", c.scope, notes)
			}
			for _, line := range strings.Split(notes, "\n") {
				if strings.HasPrefix(line, "  kubectl -n ") && !strings.HasPrefix(line, "  kubectl -n "+c.ns+" ") &&
					!strings.HasPrefix(line, "  kubectl -n "+releaseNamespace+" ") {
					t.Errorf("a command outside namespace %s: %q", c.ns, line)
				}
			}
			if create := strings.Contains(notes, "kubectl create namespace"); create != (c.set == nil) {
				t.Errorf("the NOTES create a namespace: %t, want %t", create, c.set == nil)
			}
			blocks := commandBlocks(notes)
			if len(blocks) < 4 {
				t.Fatalf("%d command blocks in the NOTES, want at least 4:\n%s", len(blocks), notes)
			}
			var kinds []string
			for _, b := range blocks {
				if stderr := runBash(t, b, "-n"); stderr != "" {
					t.Errorf("bash -n complains about\n%s\n%s", b, stderr)
				}
				// kubectl stands in: it prints each document it is handed.
				stdout := runBash(t, "kubectl() { if [[ \" $* \" == *' -f - '* ]]; then cat; echo '---'; fi; }\n"+b, "")
				for _, doc := range strings.Split(stdout, "\n---\n") {
					if strings.TrimSpace(doc) == "" {
						continue
					}
					if strings.Contains(doc, "\nYAML") || strings.HasPrefix(doc, "YAML") {
						t.Errorf("kubectl was handed the here-document's marker:\n%s", doc)
					}
					var obj struct {
						APIVersion string         `json:"apiVersion"`
						Kind       string         `json:"kind"`
						Metadata   map[string]any `json:"metadata"`
						Spec       map[string]any `json:"spec"`
					}
					if err := yaml.UnmarshalStrict([]byte(doc), &obj); err != nil {
						t.Errorf("kubectl was handed a document that is not a Kubernetes object: %v\n%s", err, doc)
					}
					kinds = append(kinds, obj.Kind)
				}
			}
			if strings.Join(kinds, ",") != strings.Join(c.kinds, ",") {
				t.Errorf("the NOTES apply %v, want %v", kinds, c.kinds)
			}
		})
	}
}

// renderNotes renders the chart's NOTES.txt for the release of the tests,
// as helm install prints them. helm install needs a cluster even with
// --dry-run, so helm template renders a copy of the chart in which the
// NOTES are a named template, included into a ConfigMap.
func renderNotes(t *testing.T, args ...string) string {
	t.Helper()
	dir := copyChart(t)
	tpl := filepath.Join(dir, "templates")
	notes, err := os.ReadFile(filepath.Join(tpl, "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"_notes.tpl":         `{{- define "storybus.test.notes" -}}` + string(notes) + `{{- end -}}`,
		"notes-as-data.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: {{ include \"storybus.test.notes\" . | toJson }}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(tpl, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(tpl, "NOTES.txt")); err != nil {
		t.Fatal(err)
	}
	out := mustHelm(t, append([]string{"template", releaseName, dir, "--namespace", releaseNamespace, "--show-only", "templates/notes-as-data.yaml"}, args...)...)
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal([]byte(out), &cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data["notes"]
}

// commandBlocks returns the NOTES' shell commands: runs of lines from one
// indented kubectl command to the next blank line, here-documents included.
func commandBlocks(notes string) []string {
	var blocks []string
	var cur []string
	for _, line := range strings.Split(notes+"\n", "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "  kubectl "):
			cur = []string{line}
		case cur != nil && strings.TrimSpace(line) == "":
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
			cur = nil
		case cur != nil:
			cur = append(cur, line)
		}
	}
	return blocks
}

// runBash runs script with bash (with flag, unless empty) and returns its
// standard error for -n, its standard output otherwise.
func runBash(t *testing.T, script, flag string) string {
	t.Helper()
	args := []string{"--noprofile", "--norc"}
	if flag != "" {
		args = append(args, flag)
	}
	cmd := exec.Command("bash", args...)
	cmd.Stdin = strings.NewReader(script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Errorf("bash %s: %v\n%s\n%s", flag, err, script, stderr.String())
	}
	if flag == "-n" {
		return stderr.String()
	}
	return stdout.String()
}
