package charts

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The chart's copies of generated files, and where they come from.
var (
	crdSource  = filepath.Join("..", "config", "crd", "bases")
	crdCopy    = filepath.Join(chartDir, "files", "crds")
	rbacSource = filepath.Join("..", "config", "rbac", "role.yaml")
	rbacCopy   = filepath.Join(chartDir, "files", "rbac", "role.yaml")
)

const crdTemplate = "storybus/templates/crds.yaml"

func TestLint(t *testing.T) {
	for _, args := range [][]string{nil, {"--values", productionValues}} {
		out := mustHelm(t, append([]string{"lint", "--strict", chartDir}, args...)...)
		if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint --strict %v:\n%s", args, out)
		}
	}
}

// TestChartFilesMatchConfig fails when the chart's copies of the CRDs and
// the ClusterRole differ from what controller-gen generated.
func TestChartFilesMatchConfig(t *testing.T) {
	sources, err := filepath.Glob(filepath.Join(crdSource, "*.yaml"))
	if err != nil || len(sources) == 0 {
		t.Fatalf("no CRDs in %s: %v", crdSource, err)
	}
	copies, _ := filepath.Glob(filepath.Join(crdCopy, "*.yaml"))
	var want, have []string
	for _, p := range sources {
		want = append(want, filepath.Base(p))
	}
	for _, p := range copies {
		have = append(have, filepath.Base(p))
	}
	if !slices.Equal(want, have) {
		t.Fatalf("the chart's CRDs %v differ from config/crd/bases %v: run make chart-sync", have, want)
	}
	pairs := map[string]string{rbacSource: rbacCopy}
	for _, p := range sources {
		pairs[p] = filepath.Join(crdCopy, filepath.Base(p))
	}
	for src, cp := range pairs {
		a, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(cp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: run make chart-sync", cp, src)
		}
	}
}

// TestRenderedCRDsMatchConfig checks that the CRDs the chart installs are
// config/crd/bases exactly, plus the keep policy and the chart's labels.
func TestRenderedCRDsMatchConfig(t *testing.T) {
	ms := splitManifests(t, render(t))
	sources, _ := filepath.Glob(filepath.Join(crdSource, "*.yaml"))
	var rendered int
	for _, m := range ms {
		if m.Source == crdTemplate {
			rendered++
		}
	}
	if rendered != len(sources) {
		t.Fatalf("chart renders %d CRDs, config/crd/bases has %d", rendered, len(sources))
	}
	for _, src := range sources {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		want := normalize(t, b)
		name := want.(map[string]any)["metadata"].(map[string]any)["name"].(string)
		m := find(t, ms, "CustomResourceDefinition", name)
		if m.Source != crdTemplate {
			t.Errorf("CRD %s comes from %s, want %s", name, m.Source, crdTemplate)
		}
		got := normalize(t, []byte(m.Text)).(map[string]any)
		md := got["metadata"].(map[string]any)
		ann := md["annotations"].(map[string]any)
		if ann["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s: annotations %v, want helm.sh/resource-policy: keep", name, ann)
		}
		delete(ann, "helm.sh/resource-policy")
		labels, _ := md["labels"].(map[string]any)
		if labels["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("CRD %s: labels %v, want the chart's", name, labels)
		}
		delete(md, "labels")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("CRD %s as rendered differs from %s beyond the keep annotation and labels", name, src)
		}
	}
}

// TestRenderedRBACMatchesConfig checks that the ClusterRole's rules are
// those controller-gen generated.
func TestRenderedRBACMatchesConfig(t *testing.T) {
	want := generatedRules(t)
	ms := splitManifests(t, render(t))
	var got rbacv1.ClusterRole
	decode(t, find(t, ms, "ClusterRole", "storybus-operator"), &got)
	if !reflect.DeepEqual(got.Rules, want) {
		t.Errorf("ClusterRole rules differ from %s:\n got %+v\nwant %+v", rbacSource, got.Rules, want)
	}
}

// generatedRules are the operator's rules as controller-gen generated them.
func generatedRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(rbacSource)
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) == 0 {
		t.Fatalf("%s has no rules", rbacSource)
	}
	return role.Rules
}

// TestGolden compares helm template's output, less the CRDs (checked above
// against their source), with testdata/*.golden.yaml. go test -update
// rewrites them.
func TestGolden(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"default", nil},
		{"production", []string{"--values", productionValues, "--api-versions", serviceMonitorAPI, "--api-versions", prometheusRuleAPI}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString("# helm template " + releaseName + " charts/storybus --namespace " + releaseNamespace)
			for _, a := range c.args {
				b.WriteString(" " + a)
			}
			b.WriteString("\n# The CRDs (templates/crds.yaml) are left out: TestRenderedCRDsMatchConfig checks them.\n")
			for _, m := range splitManifests(t, render(t, c.args...)) {
				if m.Source == crdTemplate {
					continue
				}
				b.WriteString("---\n" + strings.TrimPrefix(m.Text, "\n") + "\n")
			}
			golden(t, filepath.Join("testdata", c.name+".golden.yaml"), b.String())
		})
	}
}

// golden compares got with the file, or rewrites it under -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./charts/ -update to write it)", err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (run go test ./charts/ -update if the change is intended):\n%s", path, lineDiff(string(want), got))
	}
}

// lineDiff shows the first lines that differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n- " + a + "\n+ " + b
		}
	}
	return ""
}

// TestRenderVariants checks what values switch on and off.
func TestRenderVariants(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		ms := splitManifests(t, render(t))
		var d appsv1.Deployment
		decode(t, find(t, ms, "Deployment", "storybus-operator"), &d)
		pod := d.Spec.Template.Spec
		c := pod.Containers[0]
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
			t.Errorf("replicas %v, want 1", d.Spec.Replicas)
		}
		if c.Image != "ghcr.io/storybus/storybus:"+appVersion(t) {
			t.Errorf("image %s, want ghcr.io/storybus/storybus:%s", c.Image, appVersion(t))
		}
		checkRestricted(t, pod)
		for _, a := range []string{"--leader-elect=true", "--bus-image=" + c.Image, "--metrics-bind-address=:8443",
			"--health-probe-bind-address=:8081", "--leader-election-namespace=" + releaseNamespace,
			"--bus-cpu-request=100m", "--bus-memory-request=256Mi"} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("args %v lack %s", c.Args, a)
			}
		}
		find(t, ms, "ClusterRoleBinding", "storybus-operator")
		find(t, ms, "Role", "storybus-operator-leader-election")
		find(t, ms, "RoleBinding", "storybus-operator-leader-election")
		find(t, ms, "ServiceAccount", "storybus-operator")
		var svc corev1.Service
		decode(t, find(t, ms, "Service", "storybus-operator-metrics"), &svc)
		if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
			t.Errorf("metrics Service selects %v, the Deployment's pods are %v", svc.Spec.Selector, d.Spec.Selector.MatchLabels)
		}
		var pdb policyv1.PodDisruptionBudget
		decode(t, find(t, ms, "PodDisruptionBudget", "storybus-operator"), &pdb)
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
			t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
		}
		noKind(t, ms, "ServiceMonitor")
	})
	t.Run("serviceMonitor needs the Prometheus Operator's API", func(t *testing.T) {
		noKind(t, splitManifests(t, render(t, "--set", "metrics.serviceMonitor.enabled=true")), "ServiceMonitor")
		ms := splitManifests(t, render(t, "--set", "metrics.serviceMonitor.enabled=true", "--api-versions", serviceMonitorAPI))
		find(t, ms, "ServiceMonitor", "storybus-operator")
		noKind(t, splitManifests(t, render(t, "--api-versions", serviceMonitorAPI)), "ServiceMonitor")
	})
	t.Run("watchNamespaces puts the rules in Roles there, nothing cluster-wide", func(t *testing.T) {
		ms := splitManifests(t, render(t, "--set", "watchNamespaces={newsroom,wire},watchNamespace=desk"))
		if has(ms, "ClusterRole", "storybus-operator") {
			t.Error("a ClusterRole storybus-operator with watchNamespaces")
		}
		if has(ms, "ClusterRoleBinding", "storybus-operator") {
			t.Error("a ClusterRoleBinding storybus-operator with watchNamespaces")
		}
		generated := generatedRules(t)
		var roles, bindings []string
		for _, m := range ms {
			switch m.kind() {
			case "Role":
				var r rbacv1.Role
				decode(t, m, &r)
				if r.Name == "storybus-operator" {
					roles = append(roles, r.Namespace)
					if !reflect.DeepEqual(r.Rules, generated) {
						t.Errorf("Role in %s: rules differ from %s", r.Namespace, rbacSource)
					}
				}
			case "RoleBinding":
				var rb rbacv1.RoleBinding
				decode(t, m, &rb)
				if rb.Name == "storybus-operator" {
					bindings = append(bindings, rb.Namespace)
					if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != "storybus-operator" {
						t.Errorf("RoleBinding in %s to %+v", rb.Namespace, rb.RoleRef)
					}
				}
			}
		}
		if want := []string{"newsroom", "wire", "desk"}; !slices.Equal(roles, want) || !slices.Equal(bindings, want) {
			t.Errorf("Roles in %v, RoleBindings in %v, want %v", roles, bindings, want)
		}
		var d appsv1.Deployment
		decode(t, find(t, ms, "Deployment", "storybus-operator"), &d)
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--watch-namespaces=newsroom,wire,desk") {
			t.Errorf("args %v lack --watch-namespaces=newsroom,wire,desk", d.Spec.Template.Spec.Containers[0].Args)
		}
	})
	t.Run("metrics: HTTPS, review rights, a reader role bound on request", func(t *testing.T) {
		ms := splitManifests(t, render(t, "--set", "metrics.serviceMonitor.enabled=true", "--api-versions", serviceMonitorAPI))
		var auth rbacv1.ClusterRole
		decode(t, find(t, ms, "ClusterRole", "storybus-operator-metrics-auth"), &auth)
		want := []rbacv1.PolicyRule{
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		}
		if !reflect.DeepEqual(auth.Rules, want) {
			t.Errorf("metrics-auth rules %+v", auth.Rules)
		}
		find(t, ms, "ClusterRoleBinding", "storybus-operator-metrics-auth")
		var reader rbacv1.ClusterRole
		decode(t, find(t, ms, "ClusterRole", "storybus-operator-metrics-reader"), &reader)
		if !reflect.DeepEqual(reader.Rules, []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}) {
			t.Errorf("metrics-reader rules %+v", reader.Rules)
		}
		if has(ms, "ClusterRoleBinding", "storybus-operator-metrics-reader") {
			t.Error("metrics-reader bound with no metrics.reader.serviceAccount.name")
		}
		sm := find(t, ms, "ServiceMonitor", "storybus-operator")
		ep := sm.Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
		if ep["scheme"] != "https" || ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
			t.Errorf("ServiceMonitor endpoint %v, want https with the scraper's token", ep)
		}

		ms = splitManifests(t, render(t, "--set", "metrics.reader.serviceAccount.name=prometheus,metrics.reader.serviceAccount.namespace=monitoring"))
		var rb rbacv1.ClusterRoleBinding
		decode(t, find(t, ms, "ClusterRoleBinding", "storybus-operator-metrics-reader"), &rb)
		if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: "monitoring"}}; rb.RoleRef.Name != "storybus-operator-metrics-reader" || !slices.Equal(rb.Subjects, want) {
			t.Errorf("metrics-reader binding %+v %+v", rb.RoleRef, rb.Subjects)
		}
	})
	t.Run("tenantNetworkPolicy sets the operator's defaults", func(t *testing.T) {
		var d appsv1.Deployment
		decode(t, find(t, splitManifests(t, render(t, "--set", "tenantNetworkPolicy.enabled=true,tenantNetworkPolicy.publishNamespaces=kubernetes.io/metadata.name=gateway-system")), "Deployment", "storybus-operator"), &d)
		for _, a := range []string{"--network-policy=true", "--network-policy-publish-namespaces=kubernetes.io/metadata.name=gateway-system", "--network-policy-monitoring-namespace=monitoring", "--operator-namespace=" + releaseNamespace} {
			if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, a) {
				t.Errorf("args %v lack %s", d.Spec.Template.Spec.Containers[0].Args, a)
			}
		}
	})
	t.Run("tenantExpose and trustedProxies set the operator's defaults", func(t *testing.T) {
		var d appsv1.Deployment
		decode(t, find(t, splitManifests(t, render(t, "--set", "tenantExpose.gateway=gateway-system/public,trustedProxies={10.42.0.0/16,2001:db8::/32}")), "Deployment", "storybus-operator"), &d)
		for _, a := range []string{"--expose-gateway=gateway-system/public", "--trusted-proxies=10.42.0.0/16,2001:db8::/32"} {
			if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, a) {
				t.Errorf("args %v lack %s", d.Spec.Template.Spec.Containers[0].Args, a)
			}
		}
		decode(t, find(t, splitManifests(t, render(t)), "Deployment", "storybus-operator"), &d)
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--expose-gateway") || strings.HasPrefix(a, "--trusted-proxies") {
				t.Errorf("default args have %s", a)
			}
		}
	})
	t.Run("platformAssignsUID leaves the user to the platform", func(t *testing.T) {
		var d appsv1.Deployment
		decode(t, find(t, splitManifests(t, render(t)), "Deployment", "storybus-operator"), &d)
		if slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--bus-platform-uid") {
			t.Errorf("default args %v have --bus-platform-uid", d.Spec.Template.Spec.Containers[0].Args)
		}
		d = appsv1.Deployment{}
		decode(t, find(t, splitManifests(t, render(t, "--set", "platformAssignsUID=true")), "Deployment", "storybus-operator"), &d)
		psc := d.Spec.Template.Spec.SecurityContext
		if psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("pod securityContext %+v, want non-root with no user", psc)
		}
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--bus-platform-uid") {
			t.Errorf("args %v lack --bus-platform-uid", d.Spec.Template.Spec.Containers[0].Args)
		}
	})
	t.Run("metrics off", func(t *testing.T) {
		ms := splitManifests(t, render(t, "--set", "metrics.enabled=false"))
		noKind(t, ms, "Service")
		var d appsv1.Deployment
		decode(t, find(t, ms, "Deployment", "storybus-operator"), &d)
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--metrics-bind-address=0") {
			t.Errorf("args %v lack --metrics-bind-address=0", d.Spec.Template.Spec.Containers[0].Args)
		}
	})
	t.Run("no CRDs, no RBAC, no leader election", func(t *testing.T) {
		ms := splitManifests(t, render(t, "--set", "crds.install=false,rbac.create=false,leaderElection.enabled=false,serviceAccount.create=false,serviceAccount.name=ops"))
		for _, k := range []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"} {
			noKind(t, ms, k)
		}
		var d appsv1.Deployment
		decode(t, find(t, ms, "Deployment", "storybus-operator"), &d)
		if sa := d.Spec.Template.Spec.ServiceAccountName; sa != "ops" {
			t.Errorf("serviceAccountName %s, want ops", sa)
		}
	})
	t.Run("bus resources: quantities pass the schema, empty sets none", func(t *testing.T) {
		ms := splitManifests(t, render(t, "--set", "busResources.requests.cpu=1.5,busResources.requests.memory=", "--set", "resources.limits.memory=1e9"))
		var d appsv1.Deployment
		decode(t, find(t, ms, "Deployment", "storybus-operator"), &d)
		args := d.Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(args, "--bus-cpu-request=1.5") || !slices.Contains(args, "--bus-memory-request=") {
			t.Errorf("args %v, want --bus-cpu-request=1.5 and an empty --bus-memory-request", args)
		}
	})
	t.Run("busImage and digest", func(t *testing.T) {
		digest := "sha256:" + strings.Repeat("ab", 32)
		ms := splitManifests(t, render(t, "--set", "busImage=registry.example:5000/news/storybus:1.2.3,image.digest="+digest))
		var d appsv1.Deployment
		decode(t, find(t, ms, "Deployment", "storybus-operator"), &d)
		c := d.Spec.Template.Spec.Containers[0]
		if c.Image != "ghcr.io/storybus/storybus@"+digest {
			t.Errorf("image %s, want the digest", c.Image)
		}
		if !slices.Contains(c.Args, "--bus-image=registry.example:5000/news/storybus:1.2.3") {
			t.Errorf("args %v lack the bus image", c.Args)
		}
	})
}

// checkRestricted checks the Pod Security Standard "restricted" settings
// and more: non-root, read-only root file system, no capabilities,
// RuntimeDefault seccomp, and probes.
func checkRestricted(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v, want non-root with RuntimeDefault seccomp", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("container has no securityContext")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("container allows privilege escalation")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("container's root file system is writable")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("container capabilities %+v, want drop ALL", sc.Capabilities)
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("container is privileged")
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want GET /readyz", p)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want CPU and memory requests and a memory limit", c.Resources)
	}
}

func noKind(t *testing.T, ms []manifest, kind string) {
	t.Helper()
	for _, m := range ms {
		if m.kind() == kind {
			t.Errorf("rendered chart has %s %s, want none", kind, m.name())
		}
	}
}

// TestSchemaRefusesBadValues checks that values.schema.json refuses bad
// values, saying which value and why.
func TestSchemaRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		name string
		set  string
		want []string
	}{
		{"misspelt key", "replicas=2", []string{"additional properties 'replicas' not allowed"}},
		{"no replicas", "replicaCount=0", []string{"/replicaCount", "minimum: got 0, want 1"}},
		{"replicas without leader election", "replicaCount=2,leaderElection.enabled=false", []string{"/replicaCount", "maximum: got 2, want 1"}},
		{"log level", "logLevel=verbose", []string{"/logLevel", "value must be one of 'debug', 'info', 'warn', 'error'"}},
		{"log format", "logFormat=xml", []string{"/logFormat", "value must be one of 'json', 'text'"}},
		{"pull policy", "image.pullPolicy=Sometimes", []string{"/image/pullPolicy", "'Always', 'IfNotPresent', 'Never'"}},
		{"tag in repository", "image.repository=ghcr.io/storybus/storybus:1.0", []string{"/image/repository", "does not match pattern"}},
		{"bad digest", "image.digest=abc123", []string{"/image/digest", "'abc123' does not match pattern"}},
		{"unpinned bus image", "busImage=ghcr.io/storybus/storybus", []string{"/busImage", "does not match pattern"}},
		{"namespace", "watchNamespace=News_Room", []string{"/watchNamespace", "'News_Room' does not match pattern"}},
		{"namespaces", "watchNamespaces={News_Room}", []string{"/watchNamespaces/0", "'News_Room' does not match pattern"}},
		{"string for integer", "replicaCount=two", []string{"/replicaCount", "got string, want integer"}},
		{"PDB blocking every eviction", "podDisruptionBudget.maxUnavailable=0", []string{"/podDisruptionBudget/maxUnavailable", "minimum: got 0, want 1"}},
		{"ServiceMonitor without metrics", "metrics.enabled=false,metrics.serviceMonitor.enabled=true", []string{"/metrics/enabled", "value must be true"}},
		{"scrape interval", "metrics.serviceMonitor.interval=30sec", []string{"/metrics/serviceMonitor/interval", "does not match pattern"}},
		{"extra argument not a flag", "extraArgs[0]=serve", []string{"/extraArgs/0", "'serve' does not match pattern"}},
		{"metrics port", "metrics.service.port=70000", []string{"/metrics/service/port", "maximum: got 70,000, want 65,535"}},
		{"memory limit not a quantity", "resources.limits.memory=lots", []string{"/resources/limits/memory", "'lots' does not match pattern"}},
		{"negative request", "resources.requests.cpu=-1", []string{"/resources/requests/cpu", "minimum: got -1, want 0"}},
		{"trusted proxy not a CIDR", "trustedProxies={proxy.example}", []string{"/trustedProxies/0", "does not match pattern"}},
		{"gateway with two slashes", "tenantExpose.gateway=a/b/c", []string{"/tenantExpose/gateway", "does not match pattern"}},
		{"bus CPU request not a quantity", "busResources.requests.cpu=2cores", []string{"/busResources/requests/cpu", "'2cores' does not match pattern"}},
		{"bus variable beyond OTEL_*", "busEnv.GODEBUG=x509sha1=1", []string{"invalid propertyName 'GODEBUG'", "does not match pattern '^OTEL_"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := helm(t, "template", releaseName, chartDir, "--namespace", releaseNamespace, "--set", c.set)
			if err == nil {
				t.Fatalf("--set %s: rendered, want the schema to refuse it", c.set)
			}
			msg := err.Error()
			if !strings.Contains(msg, "values don't meet the specifications of the schema") {
				t.Errorf("--set %s: not refused by the schema: %v", c.set, msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("--set %s: message lacks %q:\n%s", c.set, w, msg)
				}
			}
		})
	}
}

// normalize parses YAML into plain values, numbers as written.
func normalize(t *testing.T, b []byte) any {
	t.Helper()
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// appVersion is the chart's appVersion.
func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml has no appVersion: %v", err)
	}
	return c.AppVersion
}

// has reports whether ms holds a document of kind and name.
func has(ms []manifest, kind, name string) bool {
	for _, m := range ms {
		if m.kind() == kind && m.name() == name {
			return true
		}
	}
	return false
}
