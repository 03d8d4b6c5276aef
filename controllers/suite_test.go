package controllers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/internal/testutil"
)

// The suite runs one real kube-apiserver and etcd (envtest) with the CRDs
// of config/crd/bases and Gateway API's standard channel, and the operator's manager in this process. Every
// test works in a namespace of its own. envtest runs no kubelet and no
// built-in controllers: StatefulSets never get ready pods by themselves and
// nothing is garbage-collected, so the tests play those parts.

// testDefaultGateway is the operator's --expose-gateway in the suite.
var testDefaultGateway = v1alpha1.GatewayParentRef{Namespace: "gateway-system", Name: "platform"}

const (
	// suiteConcurrentReconciles is the manager's reconciles of one kind at
	// a time, as `storybus operator` runs by default.
	suiteConcurrentReconciles = 4
	testBusImage              = "registry.example/storybus:test"
	waitFor                   = 30 * time.Second
)

// testBusResources are the operator's default requests of bus containers.
var testBusResources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
	corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}

var (
	// k8s is an uncached client: what the tests read is what the API
	// server holds.
	k8s client.Client
	// restConfig reaches the API server for what the client cannot ask
	// (discovery, kubectl's table output).
	restConfig *rest.Config
	// managerCache is the operator's manager's cache: what the operator
	// holds in memory.
	managerCache cache.Cache
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join("..", "bin")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: envtest needs %s in %s (KUBEBUILDER_ASSETS or bin/): run `make tools` to build it\n", bin, assets)
			return 1
		}
	}
	var logOut io.Writer = &testLogs
	if testing.Verbose() {
		logOut = io.MultiWriter(&testLogs, os.Stderr)
	}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewJSONHandler(logOut, nil)))

	gatewayCRDs, err := gatewayAPICRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: gatewayCRDs},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: start envtest: %v\n", err)
		return 1
	}
	restConfig = cfg
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}()

	scheme, err := NewScheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 LogSpecErrorsAsInfo(ctrl.Log),
		Cache:                  CacheOptions(),
		MapperProvider:         NewRESTMapper,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlconfig.Controller{MaxConcurrentReconciles: suiteConcurrentReconciles, SkipNameValidation: new(true)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: manager:", err)
		return 1
	}
	managerCache = mgr.GetCache()
	if err := Setup(mgr, Options{BusImage: testBusImage, BusResources: testBusResources,
		Expose: ExposeOptions{Gateway: &testDefaultGateway}}); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: setup:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: client:", err)
		return 1
	}
	return m.Run()
}

// gatewayAPICRDs are the standard-channel CRD files the HTTPRoute test
// needs, from the sigs.k8s.io/gateway-api module go.mod pins.
func gatewayAPICRDs() ([]string, error) {
	paths, err := testutil.GatewayAPICRDs()
	if err != nil {
		return nil, fmt.Errorf("find the sigs.k8s.io/gateway-api module: %w", err)
	}
	return paths, nil
}

// consistently fails the test when f returns an error within d.
func consistently(t *testing.T, what string, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func get(ns, name string, obj client.Object) error {
	return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
}

// mustGet reads an object that must exist, waiting for it: the Tenant's
// controllers each make their part (its bus's objects, its status) on
// their own, so one may be Ready=False while another still writes.
func mustGet(t *testing.T, ns, name string, obj client.Object) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		err := get(ns, name, obj)
		if err == nil {
			return
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("get %T %s: %v", obj, name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// update reads obj, applies mutate and writes it back, retrying on
// conflicts with the operator.
func update[T client.Object](t *testing.T, ns, name string, obj T, mutate func(T)) {
	t.Helper()
	eventually(t, "update "+name, func() error {
		if err := get(ns, name, obj); err != nil {
			return err
		}
		mutate(obj)
		return k8s.Update(context.Background(), obj)
	})
}

func gone(ns, name string, obj client.Object) error {
	err := get(ns, name, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%T %s still exists", obj, name)
}

// hasCondition checks obj's condition typ, and that it and the status
// describe the object's current generation.
func hasCondition(obj interface {
	client.Object
	v1alpha1.ConditionedObject
}, observedGeneration int64, typ string, status metav1.ConditionStatus, reason string) error {
	c := meta.FindStatusCondition(obj.GetConditions(), typ)
	switch {
	case c == nil:
		return fmt.Errorf("no condition %s in %+v", typ, obj.GetConditions())
	case c.Status != status || c.Reason != reason:
		return fmt.Errorf("%s = %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	case c.ObservedGeneration != obj.GetGeneration() || observedGeneration != obj.GetGeneration():
		return fmt.Errorf("%s observedGeneration %d, status %d, want %d", typ, c.ObservedGeneration, observedGeneration, obj.GetGeneration())
	}
	return nil
}

// waitCondition waits for the condition of the object read into obj.
func waitCondition[T interface {
	client.Object
	v1alpha1.ConditionedObject
}](t *testing.T, ns, name string, obj T, observed func(T) int64, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s %s=%s/%s", name, typ, status, reason), func() error {
		if err := get(ns, name, obj); err != nil {
			return err
		}
		return hasCondition(obj, observed(obj), typ, status, reason)
	})
}

func tenantGen(t *v1alpha1.Tenant) int64          { return t.Status.ObservedGeneration }
func connectionGen(c *v1alpha1.Connection) int64  { return c.Status.ObservedGeneration }
func grantGen(g *v1alpha1.Grant) int64            { return g.Status.ObservedGeneration }
func policyGen(p *v1alpha1.OwnershipPolicy) int64 { return p.Status.ObservedGeneration }
func waitEvent(t *testing.T, ns, kind, name, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("event %s on %s %s", reason, kind, name), func() error {
		var l eventsv1.EventList
		if err := k8s.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range l.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name {
				if e.Reason == reason {
					return nil
				}
				seen = append(seen, e.Reason)
			}
		}
		return fmt.Errorf("events seen: %v", seen)
	})
}

// noEvents fails t if the object has an Event with one of the reasons.
func noEvents(t *testing.T, ns, kind, name string, reasons ...string) {
	t.Helper()
	var l eventsv1.EventList
	if err := k8s.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && slices.Contains(reasons, e.Reason) {
			t.Errorf("%s %s has an Event %s (%s): %s", kind, name, e.Reason, e.Type, e.Note)
		}
	}
}

// workspaceOf reads and parses the Tenant's compiled configuration.
func workspaceOf(ns, tenant string) (*config.Workspace, *corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := get(ns, tenant+"-bus-config", cm); err != nil {
		return nil, nil, err
	}
	w, err := config.Parse([]byte(cm.Data[ConfigFile]))
	if err != nil {
		return nil, nil, fmt.Errorf("configuration does not parse: %w", err)
	}
	return w, cm, nil
}

// waitWorkspace waits until the Tenant's configuration satisfies check.
func waitWorkspace(t *testing.T, ns, tenant string, check func(*config.Workspace) error) *config.Workspace {
	t.Helper()
	var w *config.Workspace
	eventually(t, "workspace configuration of "+tenant, func() error {
		var err error
		if w, _, err = workspaceOf(ns, tenant); err != nil {
			return err
		}
		return check(w)
	})
	return w
}

// markReady plays the StatefulSet controller and kubelet: every desired
// replica is ready.
func markReady(t *testing.T, ns, tenant string) {
	t.Helper()
	eventually(t, "mark StatefulSet ready", func() error {
		sts := &appsv1.StatefulSet{}
		if err := get(ns, tenant+"-bus", sts); err != nil {
			return err
		}
		n := *sts.Spec.Replicas
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: n,
			AvailableReplicas: n, CurrentReplicas: n, UpdatedReplicas: n}
		return k8s.Status().Update(context.Background(), sts)
	})
}

func newTenant(ns, name string, mods ...func(*v1alpha1.Tenant)) *v1alpha1.Tenant {
	t := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, m := range mods {
		m(t)
	}
	return t
}

func newConnection(ns, name, tenant string, mods ...func(*v1alpha1.Connection)) *v1alpha1.Connection {
	c := &v1alpha1.Connection{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.ConnectionSpec{TenantRef: v1alpha1.LocalObjectReference{Name: tenant}},
	}
	for _, m := range mods {
		m(c)
	}
	return c
}

func newGrant(ns, name, conn string, pub *v1alpha1.PublishGrant, con *v1alpha1.ConsumeGrant) *v1alpha1.Grant {
	return &v1alpha1.Grant{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.GrantSpec{ConnectionRef: v1alpha1.LocalObjectReference{Name: conn}, Publish: pub, Consume: con},
	}
}

func newPolicy(ns, name, tenant string, mods ...func(*v1alpha1.OwnershipPolicy)) *v1alpha1.OwnershipPolicy {
	p := &v1alpha1.OwnershipPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.OwnershipPolicySpec{TenantRef: v1alpha1.LocalObjectReference{Name: tenant}},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

// isController reports an error unless obj is controlled by owner.
func isController(obj, owner client.Object) error {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.UID != owner.GetUID() || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		return fmt.Errorf("%T %s: controller reference %+v, want %s", obj, obj.GetName(), ref, owner.GetName())
	}
	return nil
}

var errNotYet = errors.New("not yet")

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(cs, typ)
}

// tryUpdate reads obj, applies mutate and writes it back, retrying only
// conflicts with the operator's own writes, and returns the API server's
// answer.
func tryUpdate[T client.Object](ns, name string, obj T, mutate func(T)) error {
	deadline := time.Now().Add(waitFor)
	for {
		if err := get(ns, name, obj); err != nil {
			return err
		}
		mutate(obj)
		err := k8s.Update(context.Background(), obj)
		if !apierrors.IsConflict(err) || time.Now().After(deadline) {
			return err
		}
	}
}

// eventually calls f until it returns nil, for up to waitFor.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testutil.Eventually(t, what, waitFor, f)
}
