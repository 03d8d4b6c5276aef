package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TenantWorkloadReconciler runs a Tenant's bus: its Services, StatefulSet,
// PodDisruptionBudget, volumes, NetworkPolicy, TLS Certificate, HTTPRoute
// or Ingress and PodMonitor, once the Tenant has a valid configuration,
// and the deletion policy when the Tenant goes. It owns CertificateReady,
// VolumeExpansion, Exposed and Monitored, and Available while a name or
// the workspace is taken.
type TenantWorkloadReconciler struct {
	objectWriter
	// Secrets reads and watches Secrets (TLS and NATS credentials).
	Secrets *Secrets
	// Recorder records Events on the Tenant.
	Recorder events.EventRecorder
	// Cache is the manager's cache, which the watches of cert-manager
	// Certificates and Prometheus Operator PodMonitors are added to once
	// they exist.
	Cache cache.Cache
	Options

	controller controller.Controller
	certWatch  kindWatch
	// podMonitorWatch watches PodMonitors once their CRD exists.
	podMonitorWatch kindWatch
	// gatewayAPI is true when the cluster served HTTPRoute at setup: the
	// route is then watched and written.
	gatewayAPI bool
}

// workloadScope is what the phases of one reconcile share.
type workloadScope struct {
	tenant *v1alpha1.Tenant
	// conflict is an object in the way, not controlled by the Tenant.
	conflict error
	// workspaceConflict is an older Tenant using the workspace id on the
	// same external NATS cluster.
	workspaceConflict error
	// sts is the StatefulSet as cached before this reconcile; nil when
	// there was none.
	sts *appsv1.StatefulSet
	// expose is what the expose phase saw; nil when it did not run or the
	// Tenant has no spec.expose.
	expose *exposeObservation
}

// hasConfig reports whether a valid configuration is in the Tenant's
// ConfigMap: the bus is created only then (its pods would wait for the
// ConfigMap).
func (s *workloadScope) hasConfig() bool { return s.tenant.Status.ConfigHash != "" }

// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants/status,verbs=get;patch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=tenants/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch

// Reconcile brings one Tenant's bus to its spec.
func (r *TenantWorkloadReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	t := &v1alpha1.Tenant{}
	if err := r.Get(ctx, req.NamespacedName, t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !t.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, t)
	}
	if t.Spec.Pool != nil {
		// Its pool's replicas serve it (tenant_pool_workload.go). Its data
		// on the pool's cluster is the pool finalizer's; this one is for
		// the volumes of a bus of its own, which only a Tenant that had
		// one has, and that Tenant has this finalizer since: it is added
		// before the StatefulSet is made. A Tenant placed on a pool from
		// its creation gets none, a write fewer each.
		return r.reconcilePooled(ctx, t)
	}
	if err := addTenantFinalizer(ctx, r.Client, t, v1alpha1.Finalizer, workloadFinalizerOwner); err != nil {
		return ctrl.Result{}, err
	}
	before := t.DeepCopy()
	s := &workloadScope{tenant: t}
	defer func() {
		s.setStatus()
		err = errors.Join(err, workloadStatus.write(ctx, r.Client, r.Recorder, t, before))
	}()
	return doReconcile(ctx, s,
		r.claimWorkspace,
		r.reconcileServices,
		r.reconcileTLS,
		r.reconcileStatefulSet,
		r.reconcilePDB,
		r.expandVolumes,
		r.reconcileNetworkPolicy,
		r.reconcileExpose,
		r.reconcilePodMonitor,
	)
}

// setStatus writes Available while something is in the way (and removes
// the workload controller's Available once nothing is), and the exposure.
func (s *workloadScope) setStatus() {
	t := s.tenant
	switch {
	case s.workspaceConflict != nil:
		setCondition(t, cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonWorkspaceConflict, "%v", s.workspaceConflict))
	case s.conflict != nil:
		setCondition(t, cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonNameConflict, "%v", s.conflict))
	default:
		if c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionAvailable); c != nil && isConflict(*c) {
			meta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionAvailable)
		}
	}
	applyExposeStatus(t, s.expose)
}

// write server-side applies desired as the Tenant's object of kind named
// name, unless it already holds it. It reads the object into obj first and
// returns it as it was (nil when there was none); an object of that name
// the Tenant does not control stops the reconcile (NameConflict).
func (r *TenantWorkloadReconciler) write(ctx context.Context, s *workloadScope, kind, name string, obj client.Object, desired runtime.ApplyConfiguration) (client.Object, error) {
	cur, err := r.owned(ctx, s, kind, name, obj)
	if err != nil {
		return nil, err
	}
	if _, err := r.apply(ctx, cur, desired, strings.ToLower(kind)+" "+name); err != nil {
		return nil, err
	}
	return cur, nil
}

// owned reads the Tenant's object of kind named name into obj and returns
// it, nil when there is none; one the Tenant does not control is a
// NameConflict.
func (r *TenantWorkloadReconciler) owned(ctx context.Context, s *workloadScope, kind, name string, obj client.Object) (client.Object, error) {
	exists, err := r.current(ctx, s.tenant, kind, name, obj)
	if errors.As(err, new(*nameConflictError)) {
		s.conflict = err
		return nil, terminal(err)
	}
	if err != nil {
		return nil, err
	}
	return existing(exists, obj), nil
}

func (r *TenantWorkloadReconciler) reconcileServices(ctx context.Context, s *workloadScope) (ctrl.Result, error) {
	t := s.tenant
	if _, err := r.write(ctx, s, "Service", busName(t), &corev1.Service{}, desiredHTTPService(t)); err != nil {
		return ctrl.Result{}, err
	}
	_, err := r.write(ctx, s, "Service", opsServiceName(t), &corev1.Service{}, desiredOpsService(t))
	return ctrl.Result{}, err
}

func (r *TenantWorkloadReconciler) reconcileStatefulSet(ctx context.Context, s *workloadScope) (ctrl.Result, error) {
	t := s.tenant
	sts := &appsv1.StatefulSet{}
	cur, err := r.owned(ctx, s, "StatefulSet", busName(t), sts)
	if err != nil || !s.hasConfig() {
		return ctrl.Result{}, err
	}
	if cur != nil {
		s.sts = sts
	}
	desired := desiredStatefulSet(t, r.Options)
	keepClaimTemplateSize(desired, sts)
	_, err = r.apply(ctx, cur, desired, "statefulset")
	return ctrl.Result{}, err
}

func (r *TenantWorkloadReconciler) reconcilePDB(ctx context.Context, s *workloadScope) (ctrl.Result, error) {
	t := s.tenant
	pdb := &policyv1.PodDisruptionBudget{}
	cur, err := r.owned(ctx, s, "PodDisruptionBudget", busName(t), pdb)
	if err != nil || !s.hasConfig() {
		return ctrl.Result{}, err
	}
	_, err = r.apply(ctx, cur, desiredPDB(t), "poddisruptionbudget")
	return ctrl.Result{}, err
}

// finalize applies the deletion policy, then lets the Tenant go. Its
// workloads go with it through their owner references.
func (r *TenantWorkloadReconciler) finalize(ctx context.Context, t *v1alpha1.Tenant) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(t, v1alpha1.Finalizer) {
		return ctrl.Result{}, nil
	}
	// A pooled Tenant's data on its pool's cluster is the pool
	// controller's to delete (tenant_pool.go).
	if t.Spec.Pool == nil && t.Spec.Storage != nil && t.Spec.Storage.External != nil && t.EffectiveDeletionPolicy() == v1alpha1.DeletionPolicyDelete {
		wait, err := r.deleteExternalData(ctx, t)
		if err != nil || wait > 0 {
			return requeueAfter(wait), err
		}
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := r.APIReader.List(ctx, &pvcs, client.InNamespace(t.Namespace), client.MatchingLabels(selectorLabels(t))); err != nil {
		return ctrl.Result{}, fmt.Errorf("list volumes: %w", err)
	}
	prefix := dataVolume + "-" + busName(t) + "-"
	var names []string
	for _, p := range pvcs.Items {
		if strings.HasPrefix(p.Name, prefix) {
			names = append(names, p.Name)
		}
	}
	if t.EffectiveDeletionPolicy() == v1alpha1.DeletionPolicyDelete {
		for _, n := range names {
			pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: n}}
			if err := r.Delete(ctx, pvc); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("delete volume %s: %w", n, err)
			}
		}
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "VolumesDeleted", "Delete", "deletionPolicy delete: deleted %d volume(s) %v", len(names), names)
	} else if len(names) > 0 {
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "VolumesRetained", "Delete", "deletionPolicy retain: kept %d volume(s) %v", len(names), names)
	}
	orig := t.DeepCopy()
	controllerutil.RemoveFinalizer(t, v1alpha1.Finalizer)
	if err := r.Patch(ctx, t, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("remove finalizer: %w", err)
	}
	return ctrl.Result{}, nil
}

// tenantSpecChanged passes the Tenant events that can change what the
// operator writes for it: spec or deletion changes, and label or
// annotation changes.
var tenantSpecChanged = predicate.Or[client.Object](specChanged, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{})

// tenantConfigured passes the Tenant updates that give it its first valid
// configuration, or take it away: the bus is made only once it has one.
var tenantConfigured = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	DeleteFunc: func(event.DeleteEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return (e.ObjectOld.(*v1alpha1.Tenant).Status.ConfigHash == "") != (e.ObjectNew.(*v1alpha1.Tenant).Status.ConfigHash == "")
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// SetupWithManager registers the reconciler and its watches: the Tenant's
// spec and first valid configuration, the objects it writes (their specs;
// the status of those whose status it reports), the TLS Secrets Tenants
// name, the bus's volume claims, and the Tenants on the same external
// workspace.
func (r *TenantWorkloadReconciler) SetupWithManager(mgr ctrl.Manager) error {
	var err error
	if r.gatewayAPI, err = gatewayAPIInstalled(mgr.GetRESTMapper()); err != nil {
		return err
	}
	b := r.Secrets.Watch(ctrl.NewControllerManagedBy(mgr).Named("tenant-workload"), func(ctx context.Context, o client.Object) []reconcile.Request {
		return requestsFor(o.GetNamespace(), tenantsOfTLSSecret(ctx, r.Client, o)...)
	}, nil)
	if r.gatewayAPI {
		// Its status is the Exposed condition.
		b = b.Owns(&gatewayv1.HTTPRoute{})
	}
	generation := builder.WithPredicates(predicate.GenerationChangedPredicate{})
	c, err := b.
		// A pooled Tenant's route waits for its workspace placed.
		For(&v1alpha1.Tenant{}, builder.WithPredicates(predicate.Or[client.Object](tenantSpecChanged, tenantConfigured, tenantPlacementChanged))).
		// The readiness controller reads the StatefulSet's status.
		Owns(&appsv1.StatefulSet{}, generation).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}, generation).
		Owns(&networkingv1.NetworkPolicy{}, generation).
		Owns(&networkingv1.Ingress{}).
		// A pooled Tenant's Ingress is in its pool's namespace.
		Watches(&networkingv1.Ingress{}, handler.EnqueueRequestsFromMapFunc(tenantOfPoolObject)).
		Watches(&v1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(r.sameWorkspaceTenants), builder.WithPredicates(tenantPlacementChanged)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(claimToTenant)).
		Watches(&v1alpha1.BusPool{}, handler.EnqueueRequestsFromMapFunc(r.tenantsOfPoolSpec), builder.WithPredicates(specChanged)).
		Build(observed{kind: "Tenant", inner: r})
	r.controller = c
	return err
}
