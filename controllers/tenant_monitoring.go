package controllers

import (
	"context"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/storybus/storybus/api/v1alpha1"
)

// A Tenant's bus pods are scraped through a PodMonitor of the Prometheus
// Operator, named like the bus and controlled by the Tenant, when the
// Tenant or the operator's --pod-monitor asks for one. Like cert-manager's
// Certificate, it is written as an unstructured object: the operator needs
// none of the Prometheus Operator's Go packages and starts in clusters
// without its CRDs. It asks the RESTMapper whether the cluster serves
// PodMonitor, reports PrometheusOperatorNotInstalled while it does not,
// and starts watching PodMonitors the first time it does.
//
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=podmonitors,verbs=get;list;watch;create;patch;delete

// podMonitorGVK is the Prometheus Operator's PodMonitor.
var podMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PodMonitor"}

// BusScrapeJob is the job label of the bus pods' scrapes, whichever
// PodMonitor found them: the alerts and the dashboard select by it.
const BusScrapeJob = "storybus-bus"

// MonitoringOptions are the defaults of the Tenants' spec.monitoring.
type MonitoringOptions struct {
	// PodMonitor writes a PodMonitor for every Tenant that does not say.
	PodMonitor bool
	// Interval is the scrape interval of Tenants that set none; empty
	// leaves it to Prometheus.
	Interval string
	// Labels are on every PodMonitor, under the Tenant's own.
	Labels map[string]string
}

// reconcilePodMonitor writes or removes the Tenant's PodMonitor and
// records the Monitored condition.
func (r *TenantWorkloadReconciler) reconcilePodMonitor(ctx context.Context, s *workloadScope) (ctrl.Result, error) {
	t := s.tenant
	want := t.PodMonitorEnabled(r.Monitoring.PodMonitor)
	if !want && meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionMonitored) == nil {
		// No PodMonitor was written (it would have set Monitored), so
		// there is none to remove: no need to ask whether the cluster
		// serves the kind, which costs a discovery request while it does
		// not.
		return ctrl.Result{}, nil
	}
	_, err := r.RESTMapper().RESTMapping(podMonitorGVK.GroupKind(), podMonitorGVK.Version)
	switch {
	case meta.IsNoMatchError(err):
		if !want {
			meta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionMonitored)
			return ctrl.Result{}, nil
		}
		setCondition(t, cond(v1alpha1.ConditionMonitored, metav1.ConditionFalse, v1alpha1.ReasonPrometheusOperatorNotInstalled,
			"a PodMonitor is wanted, and the Prometheus Operator's CustomResourceDefinitions (podmonitors.monitoring.coreos.com/v1) are not installed"))
		return requeueAfter(crdRecheck), nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("look up podmonitors.monitoring.coreos.com: %w", err)
	}
	if err := r.watchControlled(ctx, &r.podMonitorWatch, podMonitorGVK); err != nil {
		return ctrl.Result{}, fmt.Errorf("watch podmonitors: %w", err)
	}
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(podMonitorGVK)
	if !want {
		// The condition goes only with the PodMonitor: it says one may
		// be left to remove.
		if err := r.deleteControlled(ctx, t, cur); err != nil {
			return ctrl.Result{}, err
		}
		meta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionMonitored)
		return ctrl.Result{}, nil
	}
	if _, err := r.write(ctx, s, "PodMonitor", busName(t), cur, client.ApplyConfigurationFromUnstructured(desiredPodMonitor(t, r.Monitoring))); err != nil {
		return ctrl.Result{}, err
	}
	setCondition(t, cond(v1alpha1.ConditionMonitored, metav1.ConditionTrue, v1alpha1.ReasonPodMonitorWritten,
		"PodMonitor %s scrapes the bus pods' /metrics", busName(t)))
	return ctrl.Result{}, nil
}

// desiredPodMonitor is the Tenant's PodMonitor, whose scrapes carry the
// Tenant's name as the tenant label.
func desiredPodMonitor(t *v1alpha1.Tenant, o MonitoringOptions) *unstructured.Unstructured {
	return tenantFront(t).podMonitor(t.Spec.Monitoring, o, "tenant")
}

// podMonitor scrapes /metrics on the operations port of the bus pods,
// every pod whether ready or not (a bus that is not ready says why in its
// metrics), as job storybus-bus, with the pods' instance (the Tenant's or
// the pool's name) as the label instanceLabel.
func (f busFront) podMonitor(spec *v1alpha1.TenantMonitoring, o MonitoringOptions, instanceLabel string) *unstructured.Unstructured {
	interval := o.Interval
	labels := maps.Clone(o.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	if spec != nil && spec.PodMonitor != nil {
		if spec.PodMonitor.Interval != "" {
			interval = spec.PodMonitor.Interval
		}
		maps.Copy(labels, spec.PodMonitor.Labels)
	}
	// The operator's own labels win: it finds its objects by them.
	maps.Copy(labels, f.labels)
	selector := map[string]any{}
	for k, v := range f.selector {
		selector[k] = v
	}
	endpoint := map[string]any{
		"port":   opsPortName,
		"path":   "/metrics",
		"scheme": "http",
		"relabelings": []any{
			map[string]any{"action": "replace", "targetLabel": "job", "replacement": BusScrapeJob},
			map[string]any{"action": "replace", "sourceLabels": []any{"__meta_kubernetes_pod_label_app_kubernetes_io_instance"}, "targetLabel": instanceLabel},
		},
	}
	if interval != "" {
		endpoint["interval"] = interval
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"selector":            map[string]any{"matchLabels": selector},
			"podMetricsEndpoints": []any{endpoint},
		},
	}}
	u.SetGroupVersionKind(podMonitorGVK)
	u.SetName(f.name)
	u.SetNamespace(f.namespace)
	u.SetLabels(labels)
	u.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: *f.owner.APIVersion, Kind: *f.owner.Kind, Name: *f.owner.Name, UID: *f.owner.UID,
		Controller: f.owner.Controller, BlockOwnerDeletion: f.owner.BlockOwnerDeletion,
	}})
	return u
}
