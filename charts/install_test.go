package charts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/cmd/storybus/cli"
	"github.com/storybus/storybus/internal/testutil"
)

const waitFor = 30 * time.Second

// TestInstallUpgradeUninstall installs the chart with helm into a real
// kube-apiserver (envtest, started without CRDs: the chart brings them),
// runs the operator as the chart's Deployment would (its arguments, its
// ServiceAccount's permissions) until it has made a Tenant's bus, upgrades
// to a chart whose CRD gained a field, and uninstalls: the CRDs and the
// custom resources stay. envtest runs no kubelet, so no pod ever runs: the
// test checks objects.
func TestInstallUpgradeUninstall(t *testing.T) {
	needBinary(t, "helm")
	needBinary(t, "kube-apiserver")
	needBinary(t, "etcd")
	env := &envtest.Environment{BinaryAssetsDirectory: assetsDir()}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stop envtest: %v", err)
		}
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kube := []string{"--kubeconfig", kubeconfig, "--namespace", releaseNamespace}

	// Install.
	out := mustHelm(t, append([]string{"install", releaseName, chartDir, "--create-namespace"}, kube...)...)
	checkNotes(t, out)
	checkInstalled(t, ctx, k8s)
	checkUserRoles(t, ctx, k8s)

	// The operator, run as the chart's Deployment runs it, makes a
	// Tenant's bus with the chart's RBAC, and no more.
	tenantNS := "newsroom"
	create(t, ctx, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}})
	tenant := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "newsroom"}}
	create(t, ctx, k8s, tenant)
	checkOperatorRights(t, ctx, k8s, releaseNamespace, "storybus-operator", tenantNS, false)
	// Confined by the chart's admission policy to the objects it makes,
	// the operator still reconciles a Tenant that uses every kind it
	// writes.
	installKindsTheOperatorWrites(t, cfg)
	checkOperatorConfined(t, ctx, k8s, cfg, releaseNamespace, "storybus-operator")
	fullNS := "frontpage"
	create(t, ctx, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fullNS}})
	fullTenant(t, ctx, k8s, fullNS)
	runOperator(t, ctx, k8s, kubeconfig, releaseNamespace, "storybus-operator", tenantNS, func() { checkFullTenant(t, ctx, k8s, fullNS) })

	// A second release, scoped to one namespace: its rules are Roles there,
	// it can read no Secret elsewhere, and its operator still runs a
	// Tenant's bus with them.
	scopedNS, scopedTenantNS := "scoped-system", "scoped-newsroom"
	create(t, ctx, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scopedTenantNS}})
	mustHelm(t, "install", "scoped", chartDir, "--kubeconfig", kubeconfig, "--namespace", scopedNS, "--create-namespace",
		"--set", "crds.install=false,rbac.aggregateClusterRoles=false", "--set", "watchNamespaces={"+scopedTenantNS+"}")
	create(t, ctx, k8s, &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: scopedTenantNS, Name: scopedTenantNS}})
	checkOperatorRights(t, ctx, k8s, scopedNS, "scoped-storybus-operator", scopedTenantNS, true)
	runOperator(t, ctx, k8s, kubeconfig, scopedNS, "scoped-storybus-operator", scopedTenantNS, nil)
	mustHelm(t, "uninstall", "scoped", "--kubeconfig", kubeconfig, "--namespace", scopedNS)

	// Upgrade to a chart whose Tenant CRD has one more field.
	upgraded := copyChart(t)
	addTenantField(t, upgraded, "upgradeProbe")
	mustHelm(t, append([]string{"upgrade", releaseName, upgraded}, kube...)...)
	eventually(t, "the Tenant CRD has spec.upgradeProbe", func() error {
		crd, err := getCRD(ctx, k8s, "tenants.bus.storybus.io")
		if err != nil {
			return err
		}
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		for _, v := range versions {
			if _, ok, _ := unstructured.NestedMap(v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "upgradeProbe"); ok {
				return established(crd)
			}
		}
		return errors.New("no spec.upgradeProbe in the CRD's schema")
	})
	// The apiserver keeps the new field (it would prune a field its schema
	// does not have), and the Tenant made before the upgrade is intact.
	eventually(t, "set spec.upgradeProbe on the Tenant", func() error {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(v1alpha1.GroupVersion.String())
		u.SetKind("Tenant")
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(tenant), u); err != nil {
			return err
		}
		if err := k8s.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"upgradeProbe":"kept"}}`))); err != nil {
			return err
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(tenant), u); err != nil {
			return err
		}
		if v, _, _ := unstructured.NestedString(u.Object, "spec", "upgradeProbe"); v != "kept" {
			return fmt.Errorf("spec.upgradeProbe = %q after the patch: pruned", v)
		}
		return nil
	})
	checkKeep(t, ctx, k8s)

	// Uninstall: the operator goes, the CRDs and custom resources stay.
	mustHelm(t, append([]string{"uninstall", releaseName}, kube...)...)
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNamespace, Name: "storybus-operator"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNamespace, Name: "storybus-operator"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "storybus-operator"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "storybus-operator"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNamespace, Name: "storybus-operator-metrics"}},
	} {
		eventually(t, fmt.Sprintf("%T %s is deleted", obj, obj.GetName()), func() error {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			return errors.New("still there")
		})
	}
	checkKeep(t, ctx, k8s)
	var kept v1alpha1.Tenant
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(tenant), &kept); err != nil {
		t.Fatalf("the Tenant after helm uninstall: %v", err)
	}
	if kept.UID != tenant.UID {
		t.Errorf("the Tenant was replaced: uid %s, want %s", kept.UID, tenant.UID)
	}
	var sts appsv1.StatefulSet
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: "newsroom-bus"}, &sts); err != nil {
		t.Errorf("the Tenant's StatefulSet after helm uninstall: %v", err)
	}

	// Installing again adopts the CRDs that uninstall kept.
	mustHelm(t, append([]string{"install", releaseName, chartDir}, kube...)...)
	checkInstalled(t, ctx, k8s)
}

// checkOperatorRights asks the API server (SubjectAccessReviews) what the
// ServiceAccount of the operator installed in namespace ns may do: what a
// Tenant in tenantNS needs, yes; writing pods, Leases outside its own
// namespace, deleting Secrets, no; and, when scoped (watchNamespaces), no
// access at all outside tenantNS, Secrets included.
func checkOperatorRights(t *testing.T, ctx context.Context, k8s client.Client, ns, sa, tenantNS string, scoped bool) {
	t.Helper()
	user := "system:serviceaccount:" + ns + ":" + sa
	type access struct {
		verb, group, resource, namespace string
		allowed                          bool
	}
	checks := []access{
		{"list", "bus.storybus.io", "tenants", tenantNS, true},
		{"patch", "bus.storybus.io", "tenants/status", tenantNS, true},
		{"patch", "apps", "statefulsets", tenantNS, true},
		{"create", "", "secrets", tenantNS, true},
		{"get", "", "secrets", tenantNS, true},
		{"update", "", "secrets", tenantNS, true},
		{"patch", "networking.k8s.io", "networkpolicies", tenantNS, true},
		{"watch", "bus.storybus.io", "buspools", tenantNS, true},
		{"patch", "bus.storybus.io", "buspools/status", tenantNS, true},
		// A BusPool's spec is its owner's, never the operator's.
		{"patch", "bus.storybus.io", "buspools", tenantNS, false},
		// Only the verbs it uses: server-side apply creates (create) and
		// changes (patch) what it makes; Secrets alone are updated.
		{"create", "apps", "statefulsets", tenantNS, true},
		{"update", "apps", "statefulsets", tenantNS, false},
		{"update", "", "configmaps", tenantNS, false},
		{"update", "bus.storybus.io", "tenants/status", tenantNS, false},
		{"update", "bus.storybus.io", "tenants", tenantNS, false},
		{"watch", "", "pods", tenantNS, true},
		{"create", "coordination.k8s.io", "leases", ns, true},
		{"create", "authentication.k8s.io", "tokenreviews", "", true},
		{"create", "authorization.k8s.io", "subjectaccessreviews", "", true},
		// No pod writes anywhere: patching a pod can change its image.
		{"patch", "", "pods", tenantNS, false},
		{"patch", "", "pods", "kube-system", false},
		{"update", "", "pods", tenantNS, false},
		{"create", "", "pods", tenantNS, false},
		{"delete", "", "pods", tenantNS, false},
		// Leases in its own namespace only.
		{"get", "coordination.k8s.io", "leases", "kube-system", false},
		{"update", "coordination.k8s.io", "leases", "kube-system", false},
		{"create", "coordination.k8s.io", "leases", tenantNS, false},
		// Secrets are never deleted or patched by the operator.
		{"delete", "", "secrets", tenantNS, false},
		{"patch", "", "secrets", tenantNS, false},
	}
	if scoped {
		checks = append(checks,
			access{"list", "", "secrets", "", false},
			access{"list", "", "secrets", "kube-system", false},
			access{"get", "", "secrets", "kube-system", false},
			access{"list", "", "secrets", "newsroom", false},
			access{"list", "bus.storybus.io", "tenants", "", false},
			access{"create", "apps", "statefulsets", "newsroom", false},
		)
	} else {
		// Cluster-wide, the operator lists and watches Secrets everywhere
		// (RBAC cannot restrict by label); its cache holds only those it
		// labels, and it gets no other Secret's data unless a Connection
		// or Tenant names it.
		checks = append(checks, access{"list", "", "secrets", "", true}, access{"get", "", "secrets", "kube-system", true})
	}
	for _, c := range checks {
		resource, sub, _ := strings.Cut(c.resource, "/")
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: c.namespace, Verb: c.verb, Group: c.group, Resource: resource, Subresource: sub,
			},
		}}
		if err := k8s.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != c.allowed {
			t.Errorf("%s: %s %s in %q: allowed %v, want %v (%s)", sa, c.verb, c.resource, c.namespace, sar.Status.Allowed, c.allowed, sar.Status.Reason)
		}
	}
}

// checkUserRoles checks the ClusterRoles for users: aggregated into the
// cluster's view, edit and admin, and, bound in a namespace, letting read
// (view) or change (edit) the five kinds there, as the apiserver's RBAC
// authorizer decides. envtest runs no aggregation controller, so the roles
// are bound directly.
func checkUserRoles(t *testing.T, ctx context.Context, k8s client.Client) {
	t.Helper()
	aggregated := map[string][]string{
		"storybus-view": {"view", "edit", "admin"},
		"storybus-edit": {"edit", "admin"},
	}
	ns := "desk"
	create(t, ctx, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	for role, into := range aggregated {
		var r rbacv1.ClusterRole
		mustGet(t, ctx, k8s, "", role, &r)
		for _, to := range into {
			if r.Labels["rbac.authorization.k8s.io/aggregate-to-"+to] != "true" {
				t.Errorf("%s is not aggregated into %s: %v", role, to, r.Labels)
			}
		}
		create(t, ctx, k8s, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: role + "-user"}},
		})
	}
	for _, tc := range []struct {
		user, verb, resource, namespace string
		allowed                         bool
	}{
		{"storybus-view-user", "list", "tenants", ns, true},
		{"storybus-view-user", "get", "ownershippolicies", ns, true},
		{"storybus-view-user", "list", "buspools", ns, true},
		{"storybus-edit-user", "create", "buspools", ns, true},
		{"storybus-edit-user", "create", "connections", ns, true},
		{"storybus-edit-user", "delete", "grants", ns, true},
		{"storybus-view-user", "create", "connections", ns, false},
		{"storybus-view-user", "list", "tenants", "default", false},
		{"storybus-edit-user", "update", "tenants/status", ns, false},
	} {
		resource, sub, _ := strings.Cut(tc.resource, "/")
		review := func() (*authorizationv1.SubjectAccessReview, error) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: tc.user,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: tc.namespace, Verb: tc.verb, Group: v1alpha1.GroupVersion.Group, Resource: resource, Subresource: sub,
				},
			}}
			return sar, k8s.Create(ctx, sar)
		}
		// The API server's authorizer learns of the RoleBindings made above
		// from its own watch, a moment later on a busy machine: a right
		// granted is waited for; a right refused is asked once the grants
		// before it (the list puts them first) are in effect.
		what := fmt.Sprintf("%s %s %s in %s allowed %v", tc.user, tc.verb, tc.resource, tc.namespace, tc.allowed)
		testutil.Eventually(t, what, 30*time.Second, func() error {
			sar, err := review()
			switch {
			case err != nil:
				return err
			case sar.Status.Allowed != tc.allowed && tc.allowed:
				return fmt.Errorf("not allowed yet (%s)", sar.Status.Reason)
			case sar.Status.Allowed != tc.allowed:
				t.Errorf("%s %s %s in %s: allowed, want refused (%s)", tc.user, tc.verb, tc.resource, tc.namespace, sar.Status.Reason)
			}
			return nil
		})
	}
}

// checkInstalled checks every object of the default installation in the
// apiserver.
func checkInstalled(t *testing.T, ctx context.Context, k8s client.Client) {
	t.Helper()
	checkKeep(t, ctx, k8s)
	ms := splitManifests(t, render(t))

	var d appsv1.Deployment
	mustGet(t, ctx, k8s, releaseNamespace, "storybus-operator", &d)
	checkRestricted(t, d.Spec.Template.Spec)
	var want appsv1.Deployment
	decode(t, find(t, ms, "Deployment", "storybus-operator"), &want)
	if c, w := d.Spec.Template.Spec.Containers[0], want.Spec.Template.Spec.Containers[0]; c.Image != w.Image || !slices.Equal(c.Args, w.Args) || !slices.Equal(c.Command, w.Command) {
		t.Errorf("operator container %s %v %v, want %s %v %v", c.Image, c.Command, c.Args, w.Image, w.Command, w.Args)
	}
	if sa := d.Spec.Template.Spec.ServiceAccountName; sa != "storybus-operator" {
		t.Errorf("Deployment runs as ServiceAccount %q", sa)
	}
	mustGet(t, ctx, k8s, releaseNamespace, "storybus-operator", &corev1.ServiceAccount{})

	var role rbacv1.ClusterRole
	mustGet(t, ctx, k8s, "", "storybus-operator", &role)
	if !reflect.DeepEqual(role.Rules, generatedRules(t)) {
		t.Errorf("ClusterRole rules in the apiserver differ from %s", rbacSource)
	}
	var crb rbacv1.ClusterRoleBinding
	mustGet(t, ctx, k8s, "", "storybus-operator", &crb)
	wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: "storybus-operator", Namespace: releaseNamespace}
	if crb.RoleRef.Name != "storybus-operator" || !slices.Equal(crb.Subjects, []rbacv1.Subject{wantSubject}) {
		t.Errorf("ClusterRoleBinding %+v %+v", crb.RoleRef, crb.Subjects)
	}
	var le rbacv1.Role
	mustGet(t, ctx, k8s, releaseNamespace, "storybus-operator-leader-election", &le)
	var leb rbacv1.RoleBinding
	mustGet(t, ctx, k8s, releaseNamespace, "storybus-operator-leader-election", &leb)
	if leb.RoleRef.Name != le.Name || !slices.Equal(leb.Subjects, []rbacv1.Subject{wantSubject}) {
		t.Errorf("leader election RoleBinding %+v %+v", leb.RoleRef, leb.Subjects)
	}

	var svc corev1.Service
	mustGet(t, ctx, k8s, releaseNamespace, "storybus-operator-metrics", &svc)
	if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8443 {
		t.Errorf("metrics Service selects %v on %+v", svc.Spec.Selector, svc.Spec.Ports)
	}
	var pdb policyv1.PodDisruptionBudget
	mustGet(t, ctx, k8s, releaseNamespace, "storybus-operator", &pdb)
	if !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget selects %v", pdb.Spec.Selector.MatchLabels)
	}
}

// checkKeep checks that every CRD is there, established and marked to be
// kept by helm uninstall.
func checkKeep(t *testing.T, ctx context.Context, k8s client.Client) {
	t.Helper()
	sources, _ := filepath.Glob(filepath.Join(crdSource, "*.yaml"))
	for _, src := range sources {
		name := strings.TrimSuffix(filepath.Base(src), ".yaml")
		group, plural, _ := strings.Cut(name, "_")
		name = plural + "." + group
		eventually(t, "CRD "+name+" established", func() error {
			crd, err := getCRD(ctx, k8s, name)
			if err != nil {
				return err
			}
			if p := crd.GetAnnotations()["helm.sh/resource-policy"]; p != "keep" {
				return fmt.Errorf("helm.sh/resource-policy %q, want keep", p)
			}
			return established(crd)
		})
	}
}

func getCRD(ctx context.Context, k8s client.Client, name string) (*unstructured.Unstructured, error) {
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	return crd, k8s.Get(ctx, types.NamespacedName{Name: name}, crd)
}

func established(crd *unstructured.Unstructured) error {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return nil
		}
	}
	return fmt.Errorf("CRD %s not established: %v", crd.GetName(), conds)
}

// checkNotes checks that helm install's notes tell an admin how to create
// a Tenant and find its endpoint, and keeps them as a golden file.
func checkNotes(t *testing.T, out string) {
	t.Helper()
	_, notes, ok := strings.Cut(out, "NOTES:\n")
	if !ok {
		t.Fatalf("helm install printed no NOTES:\n%s", out)
	}
	for _, w := range []string{"kind: Tenant", "status.endpoint", "kind: Connection", "kind: Grant", "kubectl get storybus"} {
		if !strings.Contains(notes, w) {
			t.Errorf("NOTES lack %q", w)
		}
	}
	golden(t, filepath.Join("testdata", "notes.golden.txt"), notes)
}

// runOperator runs `storybus operator` with the arguments of the
// Deployment ns/name, as its ServiceAccount (impersonated: with exactly the
// chart's rights), until it has made the bus of the Tenant
// tenantNS/tenantNS and holds the leader election Lease. The bus's
// StatefulSet must run the chart's --bus-image the way the Dockerfile
// builds it.
func runOperator(t *testing.T, ctx context.Context, k8s client.Client, kubeconfig, ns, name, tenantNS string, andThen func()) {
	t.Helper()
	var d appsv1.Deployment
	mustGet(t, ctx, k8s, ns, name, &d)
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{"storybus"}) {
		t.Fatalf("Deployment command %v, want [storybus]", c.Command)
	}
	args := append(slices.Clone(c.Args),
		"--kubeconfig", impersonating(t, kubeconfig, "system:serviceaccount:"+ns+":"+d.Spec.Template.Spec.ServiceAccountName),
		// No ports in a test: the flags given last win.
		"--metrics-bind-address=0", "--health-probe-bind-address=0")
	busImage := flagValue(t, c.Args, "--bus-image")
	leaseName := flagValue(t, c.Args, "--leader-election-id")

	opCtx, stop := context.WithCancel(ctx)
	logs := &syncWriter{b: &strings.Builder{}}
	done := make(chan int, 1)
	go func() {
		done <- cli.Execute(opCtx, args, strings.NewReader(""), io.Discard, logs)
	}()
	defer func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("storybus %s exited %d", strings.Join(args, " "), code)
			}
		case <-time.After(waitFor):
			t.Error("the operator did not stop")
		}
		if t.Failed() {
			t.Logf("operator logs:\n%s", logs.String())
		}
	}()

	eventually(t, "the operator holds the Lease "+leaseName, func() error {
		var l coordinationv1.Lease
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: leaseName}, &l); err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return errors.New("no holder")
		}
		return nil
	})
	var sts appsv1.StatefulSet
	eventually(t, "the operator makes the Tenant's StatefulSet (with the chart's RBAC)", func() error {
		return k8s.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: tenantNS + "-bus"}, &sts)
	})
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
		name := map[string]string{"*v1.ConfigMap": "-bus-config", "*v1.Secret": "-bus-signing-key", "*v1.Service": "-bus", "*v1.PodDisruptionBudget": "-bus"}[fmt.Sprintf("%T", obj)]
		eventually(t, fmt.Sprintf("the operator makes the Tenant's %T", obj), func() error {
			return k8s.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: tenantNS + name}, obj)
		})
	}
	pod := sts.Spec.Template.Spec
	bus := pod.Containers[0]
	if bus.Image != busImage {
		t.Errorf("bus pods run %s, want the chart's --bus-image %s", bus.Image, busImage)
	}
	df := parseDockerfile(t)
	df.checkCommand(t, "the operator's StatefulSet", bus.Command)
	if len(bus.Args) == 0 || bus.Args[0] != "serve" {
		t.Errorf("bus pods run %v %v, want storybus serve …", bus.Command, bus.Args)
	}
	if u := pod.SecurityContext.RunAsUser; u == nil || *u != df.uid(t) {
		t.Errorf("bus pods run as %v, the image's user is %d", u, df.uid(t))
	}
	eventually(t, "the Tenant's status.endpoint", func() error {
		var tn v1alpha1.Tenant
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: tenantNS, Name: tenantNS}, &tn); err != nil {
			return err
		}
		if want := "http://" + tenantNS + "-bus." + tenantNS + ".svc.cluster.local:8080"; tn.Status.Endpoint != want {
			return fmt.Errorf("status.endpoint %q, want %q", tn.Status.Endpoint, want)
		}
		return nil
	})
	if andThen != nil {
		andThen()
	}
}

// impersonating writes a copy of kubeconfig that acts as user.
func impersonating(t *testing.T, kubeconfig, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// flagValue returns the value of --name=value in args.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s in %v", name, args)
	return ""
}

// copyChart copies the chart into a temporary directory.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "storybus")
	if err := os.CopyFS(dst, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// addTenantField adds the string property spec.<field> to the chart's
// Tenant CRD in dir.
func addTenantField(t *testing.T, dir, field string) {
	t.Helper()
	p := filepath.Join(dir, "files", "crds", "bus.storybus.io_tenants.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	u := unstructured.Unstructured{Object: crd}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range versions {
		if err := unstructured.SetNestedMap(v.(map[string]any), map[string]any{"type": "string", "description": "A field the upgrade adds."},
			"schema", "openAPIV3Schema", "properties", "spec", "properties", field); err != nil {
			t.Fatal(err)
		}
	}
	if err := unstructured.SetNestedSlice(u.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, ctx context.Context, k8s client.Client, obj client.Object) {
	t.Helper()
	eventually(t, fmt.Sprintf("create %T %s", obj, obj.GetName()), func() error {
		return k8s.Create(ctx, obj)
	})
}

func mustGet(t *testing.T, ctx context.Context, k8s client.Client, ns, name string, obj client.Object) {
	t.Helper()
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatalf("get %T %s/%s: %v", obj, ns, name, err)
	}
}

// syncWriter is a strings.Builder the operator's goroutine writes and the
// test reads.
type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// eventually calls f until it returns nil, for up to waitFor.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testutil.Eventually(t, what, waitFor, f)
}
