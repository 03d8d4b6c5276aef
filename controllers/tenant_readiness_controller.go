package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TenantReadinessReconciler says whether a Tenant's bus serves: its
// StatefulSet's ready replicas, why the other pods are not ready, and which
// configuration every ready pod has loaded (asked on its operations
// port), summarised in Ready. It writes nothing but the Tenant's status:
// Available, ConfigurationLoaded, Ready and the replica and endpoint
// fields.
type TenantReadinessReconciler struct {
	client.Client
	// Recorder records Events on the Tenant.
	Recorder events.EventRecorder
	Options
}

// readiness is what one reconcile saw of a Tenant's bus.
type readiness struct {
	// sts is the Tenant's StatefulSet; nil when there is none.
	sts *appsv1.StatefulSet
	// loads is what each ready bus pod said it serves, problems why the
	// others are not ready.
	loads    []podLoad
	problems []string
}

// loadedRecheck is how often the operator asks bus pods again while they
// do not serve the compiled configuration: kubelet brings a ConfigMap
// change to the pods within a minute or so, and no event says when.
const loadedRecheck = time.Second

// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants,verbs=get;list;watch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch

// Reconcile decides whether one Tenant's bus serves its configuration.
func (r *TenantReadinessReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	t := &v1alpha1.Tenant{}
	if err := r.Get(ctx, req.NamespacedName, t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if t.Spec.Pool != nil {
		// A pooled Tenant's readiness is its pool's (tenant_pool.go).
		return ctrl.Result{}, nil
	}
	if !t.DeletionTimestamp.IsZero() || !configurationDecided(t) {
		// Ready waits for the configuration controller to judge this
		// generation: until then it describes the last one judged.
		return ctrl.Result{}, nil
	}
	before := t.DeepCopy()
	var o readiness
	err := r.observe(ctx, t, &o)
	if err == nil {
		setReadiness(t, &o, r.ClusterDomain)
		if held := readinessHeld(t, before, time.Now()); held > 0 {
			return requeueAfter(held), nil
		}
	}
	switch werr := readinessStatus.write(ctx, r.Client, r.Recorder, t, before); {
	case errors.Is(werr, errYielded) && err == nil:
		// The workload controller holds Available for a conflict the
		// cache does not show yet.
		return requeueAfter(time.Second), nil
	case werr != nil:
		return ctrl.Result{}, errors.Join(err, werr)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(o.loads) > 0 && loadedHash(o.loads) != t.Status.ConfigHash {
		return requeueAfter(loadedRecheck), nil
	}
	return ctrl.Result{}, nil
}

// configurationDecided reports whether the configuration controller has
// judged t's current generation (or the workload controller found a
// conflict that stops it).
func configurationDecided(t *v1alpha1.Tenant) bool {
	if c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionAvailable); c != nil && isConflict(*c) {
		return true
	}
	c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionConfigurationValid)
	return c != nil && c.ObservedGeneration == t.Generation
}

// observe reads the Tenant's StatefulSet and bus pods, and asks every
// ready pod which configuration it serves.
func (r *TenantReadinessReconciler) observe(ctx context.Context, t *v1alpha1.Tenant, o *readiness) error {
	sts := &appsv1.StatefulSet{}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: busName(t)}, sts); {
	case err == nil && controlledBy(sts, t):
		o.sts = sts
	case client.IgnoreNotFound(err) != nil:
		return fmt.Errorf("get statefulset: %w", err)
	}
	if t.Status.ConfigHash == "" {
		return nil
	}
	// The pods are only read: listed without copying the cache.
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(t.Namespace), client.MatchingFields{indexPodTenant: t.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list bus pods: %w", err)
	}
	prober := r.Prober
	if prober == nil {
		prober = &HTTPConfigProber{}
	}
	ready := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if !podReady(p) {
			continue
		}
		ready++
		hash, err := prober.LoadedConfigHash(ctx, p, t.EffectiveWorkspaceID())
		o.loads = append(o.loads, podLoad{pod: p.Name, hash: hash, err: err})
	}
	if ready < int(t.EffectiveReplicas()) {
		var pvcs corev1.PersistentVolumeClaimList
		if err := r.List(ctx, &pvcs, client.InNamespace(t.Namespace), client.MatchingLabels(selectorLabels(t))); err != nil {
			return fmt.Errorf("list volume claims: %w", err)
		}
		o.problems = podProblems(pods.Items, pvcs.Items)
	}
	return nil
}

// setReadiness writes what o says into t's status: the replica and
// endpoint fields, Available (unless the workload controller holds it for
// a conflict), ConfigurationLoaded and the Ready summary.
func setReadiness(t *v1alpha1.Tenant, o *readiness, clusterDomain string) {
	t.Status.WorkspaceID = t.EffectiveWorkspaceID()
	t.Status.Endpoint = endpoint(t, clusterDomain)
	t.Status.Replicas = t.EffectiveReplicas()
	t.Status.ReadyReplicas = 0
	if o.sts != nil {
		t.Status.ReadyReplicas = o.sts.Status.ReadyReplicas
	}
	t.Status.LoadedConfigHash = loadedHash(o.loads)
	if c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionAvailable); c == nil || !isConflict(*c) {
		setCondition(t, availableCondition(t, o))
	}
	if c, ok := loadedCondition(t, o); ok {
		setCondition(t, c)
	} else {
		meta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionConfigurationLoaded)
	}
	setCondition(t, tenantReady(t))
	t.Status.ObservedGeneration = t.Generation
}

// availableCondition is the Available condition: whether the desired bus
// replicas are ready.
func availableCondition(t *v1alpha1.Tenant, o *readiness) metav1.Condition {
	desired, ready := t.EffectiveReplicas(), t.Status.ReadyReplicas
	switch {
	case t.Status.ConfigHash == "":
		return cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonAwaitingConfiguration,
			"the bus is created once the Tenant has a valid configuration")
	case desired == 0:
		return cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonScaledToZero, "spec.replicas is 0: no bus pod serves")
	case ready >= desired:
		return cond(v1alpha1.ConditionAvailable, metav1.ConditionTrue, v1alpha1.ReasonReplicasReady,
			"%d/%d bus replicas ready at %s", ready, desired, t.Status.Endpoint)
	case len(o.problems) > 0:
		return cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady,
			"%d/%d bus replicas ready: %s", ready, desired, strings.Join(o.problems, "; "))
	}
	return cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady,
		"%d/%d bus replicas ready", ready, desired)
}

// loadedCondition is the ConfigurationLoaded condition; false when there
// is no configuration to load yet.
func loadedCondition(t *v1alpha1.Tenant, o *readiness) (metav1.Condition, bool) {
	hash := t.Status.ConfigHash
	switch {
	case hash == "":
		return metav1.Condition{}, false
	case len(o.loads) == 0:
		return cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionFalse, v1alpha1.ReasonConfigurationNotLoaded,
			"no bus pod is ready to serve configuration %s", hash), true
	case loadedHash(o.loads) == hash:
		return cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionTrue, v1alpha1.ReasonConfigurationLoaded,
			"every ready bus pod (%d) serves configuration %s", len(o.loads), hash), true
	}
	return cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionFalse, v1alpha1.ReasonConfigurationNotLoaded,
		"configuration %s is not loaded yet: %s", hash, notLoaded(o.loads, hash)), true
}

// tenantReady summarises ConfigurationValid, Available and
// ConfigurationLoaded into Ready. A condition that describes an older
// generation than t's is not yet known.
func tenantReady(t *v1alpha1.Tenant) metav1.Condition {
	var current []metav1.Condition
	for _, c := range t.Status.Conditions {
		if c.ObservedGeneration == t.Generation {
			current = append(current, c)
		}
	}
	return summarize(current, v1alpha1.ConditionConfigurationValid, v1alpha1.ConditionAvailable, v1alpha1.ConditionConfigurationLoaded)
}

// tenantReadinessChanged passes the Tenant events that can change its
// readiness: spec or deletion changes, and the other controllers' parts of
// the status the Ready summary reads (the configuration compiled, whether
// it is valid, a conflict in the way).
var tenantReadinessChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if specChanged.Update(e) {
			return true
		}
		old, cur := e.ObjectOld.(*v1alpha1.Tenant), e.ObjectNew.(*v1alpha1.Tenant)
		return old.Status.ConfigHash != cur.Status.ConfigHash ||
			judgedChanged(old.Status.Conditions, cur.Status.Conditions, v1alpha1.ConditionConfigurationValid) ||
			judgedChanged(old.Status.Conditions, cur.Status.Conditions, v1alpha1.ConditionAvailable) && !availableIsReadiness(old, cur)
	},
}

// judgedChanged reports whether condition typ differs between a and b, or
// was judged for another generation.
func judgedChanged(a, b []metav1.Condition, typ string) bool {
	x, y := meta.FindStatusCondition(a, typ), meta.FindStatusCondition(b, typ)
	return conditionChanged(a, b, typ) || x != nil && y != nil && x.ObservedGeneration != y.ObservedGeneration
}

// availableIsReadiness reports whether the readiness controller itself
// decided both Available conditions: its own writes need no second look.
func availableIsReadiness(old, cur *v1alpha1.Tenant) bool {
	a := meta.FindStatusCondition(old.Status.Conditions, v1alpha1.ConditionAvailable)
	b := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionAvailable)
	return a != nil && b != nil && !isConflict(*a) && !isConflict(*b)
}

// SetupWithManager registers the reconciler and its watches: the Tenant,
// its StatefulSet (the ready replicas), its bus pods and their volume
// claims.
func (r *TenantReadinessReconciler) SetupWithManager(mgr ctrl.Manager) error {
	toTenant := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return requestsFor(o.GetNamespace(), o.GetLabels()[LabelTenant])
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("tenant-readiness").
		For(&v1alpha1.Tenant{}, builder.WithPredicates(tenantReadinessChanged)).
		Owns(&appsv1.StatefulSet{}).
		Watches(&corev1.Pod{}, toTenant).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(claimToTenant)).
		Complete(observed{kind: "Tenant", inner: r})
}
