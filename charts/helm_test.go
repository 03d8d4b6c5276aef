package charts

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the rendered chart")

const (
	// chartDir is the chart under test, relative to this package.
	chartDir = "storybus"
	// releaseName and releaseNamespace are those of every rendering and
	// install in the tests.
	releaseName      = "storybus"
	releaseNamespace = "storybus-system"
	// productionValues is a production-like values file.
	productionValues = "testdata/values-production.yaml"
	// serviceMonitorAPI is what the ServiceMonitor template asks the
	// cluster for.
	serviceMonitorAPI = "monitoring.coreos.com/v1/ServiceMonitor"
)

// helmHome isolates helm's configuration, cache and data, and its default
// kubeconfig, from the user's: no test reaches a cluster it did not start.
var helmHome string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "storybus-chart-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	helmHome = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// assetsDir is where the tests find helm, kube-apiserver and etcd:
// KUBEBUILDER_ASSETS, or the repository's bin/.
func assetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	return filepath.Join("..", "bin")
}

// needBinary fails the test unless the named binary is in assetsDir.
func needBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(assetsDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the chart tests need %s in %s (KUBEBUILDER_ASSETS or bin/): run `make tools` to build it", name, assetsDir())
	}
	return p
}

// helm runs the helm binary and returns its standard output, or an error
// carrying its standard error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(needBinary(t, "helm"), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"),
		"HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"),
		"HELM_DATA_HOME="+filepath.Join(helmHome, "data"),
		"KUBECONFIG="+filepath.Join(helmHome, "no-kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// mustHelm is helm for calls that must succeed.
func mustHelm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// render runs helm template on the chart with the release of the tests.
func render(t *testing.T, args ...string) string {
	t.Helper()
	return mustHelm(t, append([]string{"template", releaseName, chartDir, "--namespace", releaseNamespace}, args...)...)
}

// manifest is one document of helm template's output.
type manifest struct {
	// Source is the template it came from, e.g. storybus/templates/crds.yaml.
	Source string
	// Text is the document as rendered, without the separator.
	Text string
	// Object is the document parsed.
	Object map[string]any
}

func (m manifest) kind() string { s, _ := m.Object["kind"].(string); return s }

func (m manifest) name() string {
	md, _ := m.Object["metadata"].(map[string]any)
	s, _ := md["name"].(string)
	return s
}

// splitManifests parses helm template's output into documents.
func splitManifests(t *testing.T, out string) []manifest {
	t.Helper()
	var ms []manifest
	for _, doc := range strings.Split("\n"+out, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		m := manifest{Text: doc}
		if first, _, _ := strings.Cut(doc, "\n"); strings.HasPrefix(first, "# Source: ") {
			m.Source = strings.TrimPrefix(first, "# Source: ")
		}
		if err := yaml.Unmarshal([]byte(doc), &m.Object); err != nil {
			t.Fatalf("rendered document from %s does not parse: %v\n%s", m.Source, err, doc)
		}
		if m.Object == nil {
			continue
		}
		ms = append(ms, m)
	}
	return ms
}

// find returns the one document of kind and name, failing the test when
// there is none or more than one.
func find(t *testing.T, ms []manifest, kind, name string) manifest {
	t.Helper()
	var found []manifest
	for _, m := range ms {
		if m.kind() == kind && m.name() == name {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("rendered chart has %d %s %q, want 1; it has: %s", len(found), kind, name, kinds(ms))
	}
	return found[0]
}

// kinds lists the documents as kind/name, for failure messages.
func kinds(ms []manifest) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.kind()+"/"+m.name())
	}
	return strings.Join(s, ", ")
}

// decode converts a rendered document into a typed object.
func decode(t *testing.T, m manifest, into any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(m.Text), into); err != nil {
		t.Fatalf("%s %s: %v", m.kind(), m.name(), err)
	}
}
