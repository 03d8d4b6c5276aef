package controllers

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TestTenantPodMonitor: without the Prometheus Operator's CRDs a Tenant
// asking for a PodMonitor says so and is otherwise served; once they are
// installed (the Prometheus Operator's own, from the version pinned in
// hack/tools/prometheus-operator), the operator writes a PodMonitor the
// real schema accepts, scraping the bus pods' operations port, repairs it
// when it is deleted, and removes it when the Tenant turns it off. A
// Tenant that does not ask gets none. It installs the CRDs into the
// suite's API server, so it runs once per suite.
func TestTenantPodMonitor(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "news", func(tn *v1alpha1.Tenant) {
		tn.Spec.Monitoring = &v1alpha1.TenantMonitoring{PodMonitor: &v1alpha1.TenantPodMonitor{
			Enabled: new(true), Interval: "15s", Labels: map[string]string{"release": "platform-prometheus"},
		}}
	}))
	create(t, newTenant(ns, "quiet"))
	create(t, newBusPool(ns, "watched", "nats://127.0.0.1:1", func(p *v1alpha1.BusPool) {
		p.Spec.Monitoring = &v1alpha1.TenantMonitoring{PodMonitor: &v1alpha1.TenantPodMonitor{Enabled: new(true)}}
	}))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionMonitored, metav1.ConditionFalse, v1alpha1.ReasonPrometheusOperatorNotInstalled)
	waitCondition(t, ns, "watched", &v1alpha1.BusPool{}, busPoolGen, v1alpha1.ConditionMonitored, metav1.ConditionFalse, v1alpha1.ReasonPrometheusOperatorNotInstalled)

	if _, err := envtest.InstallCRDs(restConfig, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(pinnedModuleDir(t, "prometheus-operator", "github.com/prometheus-operator/prometheus-operator"),
			"example", "prometheus-operator-crd", "monitoring.coreos.com_podmonitors.yaml")},
		ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatalf("install Prometheus Operator CRDs: %v", err)
	}

	pm := podMonitor()
	eventuallyAfterRecheck(t, "PodMonitor news-bus", func() error { return get(ns, "news-bus", pm) })
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionMonitored, metav1.ConditionTrue, v1alpha1.ReasonPodMonitorWritten)
	if err := isController(pm, tn); err != nil {
		t.Error(err)
	}
	if l := pm.GetLabels(); l["release"] != "platform-prometheus" || l[LabelTenant] != "news" || l[LabelManagedBy] != FieldManager {
		t.Errorf("labels %v", l)
	}
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	want := map[string]string{"app.kubernetes.io/name": "storybus", "app.kubernetes.io/component": "bus", "app.kubernetes.io/instance": "news"}
	if !maps.Equal(sel, want) {
		t.Errorf("selector %v, want %v", sel, want)
	}
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 {
		t.Fatalf("podMetricsEndpoints %v", eps)
	}
	ep := eps[0].(map[string]any)
	if ep["port"] != "ops" || ep["path"] != "/metrics" || ep["interval"] != "15s" || ep["scheme"] != "http" {
		t.Errorf("endpoint %v", ep)
	}
	// The schema kept the relabelings (a misspelt field would be pruned).
	rl, _, _ := unstructured.NestedSlice(ep, "relabelings")
	targets := []string{}
	for _, r := range rl {
		targets = append(targets, r.(map[string]any)["targetLabel"].(string))
	}
	if !slices.Equal(targets, []string{"job", "tenant"}) || rl[0].(map[string]any)["replacement"] != BusScrapeJob {
		t.Errorf("relabelings %v", rl)
	}

	// A pool asks as a Tenant does; its scrapes are labelled by pool.
	eventually(t, "PodMonitor watched-pool", func() error { return get(ns, "watched-pool", podMonitor()) })
	ppm := podMonitor()
	mustGet(t, ns, "watched-pool", ppm)
	psel, _, _ := unstructured.NestedStringMap(ppm.Object, "spec", "selector", "matchLabels")
	if psel["app.kubernetes.io/component"] != "pool" || psel["app.kubernetes.io/instance"] != "watched" {
		t.Errorf("pool PodMonitor selector %v", psel)
	}
	peps, _, _ := unstructured.NestedSlice(ppm.Object, "spec", "podMetricsEndpoints")
	prl, _, _ := unstructured.NestedSlice(peps[0].(map[string]any), "relabelings")
	if len(prl) != 2 || prl[1].(map[string]any)["targetLabel"] != "pool" {
		t.Errorf("pool PodMonitor relabelings %v: want the instance as pool", prl)
	}
	pool := &v1alpha1.BusPool{}
	waitCondition(t, ns, "watched", pool, busPoolGen, v1alpha1.ConditionMonitored, metav1.ConditionTrue, v1alpha1.ReasonPodMonitorWritten)

	// A Tenant that did not ask has none, and no condition.
	quiet := &v1alpha1.Tenant{}
	mustGet(t, ns, "quiet", quiet)
	if err := get(ns, "quiet-bus", podMonitor()); !apierrors.IsNotFound(err) {
		t.Errorf("PodMonitor of a Tenant that did not ask: %v", err)
	}
	if c := meta.FindStatusCondition(quiet.Status.Conditions, v1alpha1.ConditionMonitored); c != nil {
		t.Errorf("Monitored on a Tenant that did not ask: %+v", c)
	}

	// Deleted by someone: written again.
	if err := k8s.Delete(context.Background(), pm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "PodMonitor written again", func() error {
		again := podMonitor()
		if err := get(ns, "news-bus", again); err != nil {
			return err
		}
		if again.GetUID() == pm.GetUID() {
			return errNotYet
		}
		return nil
	})

	// Turned off: removed, and the condition with it.
	mustGet(t, ns, "news", tn)
	orig := tn.DeepCopy()
	tn.Spec.Monitoring.PodMonitor.Enabled = new(false)
	if err := k8s.Patch(context.Background(), tn, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "PodMonitor removed", func() error {
		if err := get(ns, "news-bus", podMonitor()); !apierrors.IsNotFound(err) {
			return errors.Join(errNotYet, err)
		}
		if err := get(ns, "news", tn); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.ConditionMonitored); c != nil {
			return errors.New("Monitored condition still set")
		}
		return nil
	})
}

func podMonitor() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(podMonitorGVK)
	return u
}
