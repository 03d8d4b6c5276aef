package controllers

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/internal/buildinfo"
)

// The operator's own metrics, served with controller-runtime's on the
// operator's /metrics.
var (
	// configurationGeneration is, per Tenant, the generation whose
	// workspace configuration the operator last compiled and wrote.
	configurationGeneration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "storybus_operator_tenant_configuration_generation",
		Help: "The Tenant generation whose workspace configuration the operator last compiled and wrote to its ConfigMap.",
	}, []string{"namespace", "tenant"})
	// reconcileErrors counts the reconciles that failed and will be
	// retried, by kind and the API server's reason. A spec the user must
	// fix is not one: its conditions say so.
	reconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "storybus_operator_reconcile_errors_total",
		Help: "Reconciles that failed and are retried, by kind and reason (the API server's status reason, or Unknown).",
	}, []string{"kind", "reason"})
	// uncachedReads counts the operator's reads (a get or a list) from the
	// API server past its cache, by kind. The optional kinds it reads as
	// unstructured objects (PodMonitors, Certificates) are not counted.
	uncachedReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "storybus_operator_uncached_reads_total",
		Help: "Reads (a get or a list) the operator made from the API server past its cache, by kind: Secrets users name, a name the cache does not hold, a trimmed StatefulSet whose applied fields changed, a namespace a pool admits by label, a storage class, a deleted Tenant's volume claims.",
	}, []string{"kind"})
	tenantsDesc = prometheus.NewDesc("storybus_operator_tenants",
		"Tenants by condition type, status and reason.", []string{"condition", "status", "reason"}, nil)
)

func init() {
	metrics.Registry.MustRegister(configurationGeneration, reconcileErrors, uncachedReads, buildinfo.NewCollector())
}

// DescribeMetrics sends the descriptors of the operator's own metrics,
// whether or not they hold a series yet (controller-runtime's are in its
// metrics.Registry). Alerts and dashboards are checked against them.
func DescribeMetrics(ch chan<- *prometheus.Desc) {
	configurationGeneration.Describe(ch)
	reconcileErrors.Describe(ch)
	uncachedReads.Describe(ch)
	tenantCollector{}.Describe(ch)
}

// countedReader is a reader past the cache whose reads uncachedReads
// counts.
type countedReader struct {
	client.Reader
	scheme *runtime.Scheme
}

// Get reads one object from the API server.
func (r countedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.count(obj)
	return r.Reader.Get(ctx, key, obj, opts...)
}

// List lists objects from the API server.
func (r countedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.count(list)
	return r.Reader.List(ctx, list, opts...)
}

// count counts one read of obj's kind (a list's, for a list).
func (r countedReader) count(obj runtime.Object) {
	kind := "unknown"
	if gvk, err := apiutil.GVKForObject(obj, r.scheme); err == nil {
		kind = strings.TrimSuffix(gvk.Kind, "List")
	}
	uncachedReads.WithLabelValues(kind).Inc()
}

// tenantCollector counts the Tenants in the manager's cache by condition
// when scraped, so that a deleted Tenant leaves nothing behind.
type tenantCollector struct {
	reader client.Reader
}

// Describe implements prometheus.Collector.
func (c tenantCollector) Describe(ch chan<- *prometheus.Desc) { ch <- tenantsDesc }

// Collect implements prometheus.Collector.
func (c tenantCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var l v1alpha1.TenantList
	if err := c.reader.List(ctx, &l); err != nil {
		ch <- prometheus.NewInvalidMetric(tenantsDesc, err)
		return
	}
	type key struct{ condition, status, reason string }
	counts := map[key]int{}
	for _, t := range l.Items {
		for _, cd := range t.Status.Conditions {
			counts[key{cd.Type, string(cd.Status), cd.Reason}]++
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(tenantsDesc, prometheus.GaugeValue, float64(n), k.condition, k.status, k.reason)
	}
}

// registerMetrics adds the Tenant counts read through reader to the
// registry, in place of those of an earlier manager of this process.
func registerMetrics(reader client.Reader) error {
	c := tenantCollector{reader: reader}
	metrics.Registry.Unregister(c)
	return metrics.Registry.Register(c)
}

// forgetTenantMetrics drops the metrics of a Tenant that is gone.
func forgetTenantMetrics(t types.NamespacedName) {
	configurationGeneration.DeleteLabelValues(t.Namespace, t.Name)
}

// observed wraps a reconciler of kind: errors to be retried are counted by
// the API server's reason. A spec the user must fix
// (reconcile.TerminalError) is already in the object's status and Events:
// it is returned as it is, so that controller-runtime counts it among its
// terminal errors and does not retry it, and is not counted here. A
// reconcile cut short because the operator stops is neither.
type observed struct {
	kind  string
	inner reconcile.Reconciler
}

// Reconcile implements reconcile.Reconciler.
func (o observed) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := o.inner.Reconcile(ctx, req)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, reconcile.TerminalError(nil)):
		return res, err
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// The operator is stopping: the next leader reconciles again.
		log.FromContext(ctx).Info("reconcile interrupted by shutdown")
		return ctrl.Result{}, nil
	}
	reconcileErrors.WithLabelValues(o.kind, errorReason(err)).Inc()
	return res, err
}

// LogSpecErrorsAsInfo returns l, except that it writes a reconcile error
// that is a reconcile.TerminalError (a spec the user must fix, already in
// the object's status and Events) at INFO, "waiting for the spec to be
// fixed", not as controller-runtime's ERROR "Reconciler error": an
// operator's ERROR is for its administrators. Give it to the manager
// (manager.Options.Logger).
func LogSpecErrorsAsInfo(l logr.Logger) logr.Logger {
	if l.GetSink() == nil {
		return l
	}
	return l.WithSink(specErrorSink{l.GetSink()})
}

// specErrorSink is the sink of LogSpecErrorsAsInfo.
type specErrorSink struct{ logr.LogSink }

// Error implements logr.LogSink.
func (s specErrorSink) Error(err error, msg string, kv ...any) {
	if !errors.Is(err, reconcile.TerminalError(nil)) {
		s.LogSink.Error(err, msg, kv...)
		return
	}
	if s.Enabled(0) {
		s.LogSink.Info(0, "waiting for the spec to be fixed", append(kv, "error", err.Error())...)
	}
}

// WithValues implements logr.LogSink.
func (s specErrorSink) WithValues(kv ...any) logr.LogSink {
	return specErrorSink{s.LogSink.WithValues(kv...)}
}

// WithName implements logr.LogSink.
func (s specErrorSink) WithName(name string) logr.LogSink {
	return specErrorSink{s.LogSink.WithName(name)}
}

// errorReason is the API server's reason for err, such as Conflict or
// Forbidden, or Unknown.
func errorReason(err error) string {
	if r := apierrors.ReasonForError(err); r != metav1.StatusReasonUnknown {
		return string(r)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "Timeout"
	}
	return "Unknown"
}
