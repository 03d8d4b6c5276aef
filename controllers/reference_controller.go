package controllers

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
)

// referenceReconciler reports on an object whose only job is a reference
// to a Tenant that must resolve: whether it resolves (ResolvedRefs), and
// whether the Tenant's configuration compiled and serves it (InForce).
// The Tenant's configuration controller folds the object in; Grants and
// OwnershipPolicies are checked by one each.
type referenceReconciler[T statusObject] struct {
	client.Client
	// Recorder records Events on the object.
	Recorder events.EventRecorder
	// kind is the object's kind, as Tenant.status.compiled names it.
	kind string
	// newObject returns an empty object of the kind.
	newObject func() T
	// tenantOf resolves the object's Tenant: its name, and a reference
	// check that failed on the way (a Grant's Connection not found).
	tenantOf func(ctx context.Context, obj T) (string, refsObservation, error)
	// validate checks the spec; nil when every spec is valid.
	validate func(obj T) error
	// setTenant records the Tenant resolved in the status; nil when the
	// kind has no such field.
	setTenant func(obj T, tenant string)
	// summary are the conditions Ready summarises, in order.
	summary []string
	// watch adds the watches of the objects the check reads.
	watch func(*builder.Builder) *builder.Builder
}

// Reconcile reports whether one object's references resolve and whether
// it is in force.
func (r *referenceReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	// The cache's own object is what it was; the copy is what it becomes.
	before := r.newObject()
	if err := r.Get(ctx, req.NamespacedName, before, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	obj := before.DeepCopyObject().(T)
	var invalid error
	if r.validate != nil {
		invalid = r.validate(obj)
	}
	var refs refsObservation
	var t *v1alpha1.Tenant
	tenant := ""
	defer func() {
		if r.setTenant != nil {
			r.setTenant(obj, tenant)
		}
		setConditions(obj, obj.GetGeneration(), referenceConditions(r.kind, refs, invalid, r.validate != nil, t, obj), r.summary...)
		wait, perr := patchStatus(ctx, r.Client, r.Recorder, obj, before, t)
		if err = errors.Join(err, perr); err == nil {
			res = lowestNonZeroResult(res, requeueAfter(wait))
		}
	}()
	tenant, refs, err = r.tenantOf(ctx, obj)
	if err != nil || refs.checked {
		return ctrl.Result{}, err
	}
	if refs, t, err = resolveTenant(ctx, r.Client, obj.GetNamespace(), tenant); err != nil {
		return ctrl.Result{}, err
	}
	if invalid != nil {
		return ctrl.Result{}, terminal(invalid)
	}
	return ctrl.Result{}, nil
}

// referenceConditions returns the conditions of a reference check
// against Tenant t (nil when not found), Ready excluded: Accepted when the
// kind validates its spec, then ResolvedRefs and InForce once the
// references were checked.
func referenceConditions(kind string, refs refsObservation, invalid error, validates bool, t *v1alpha1.Tenant, obj client.Object) []metav1.Condition {
	var cs []metav1.Condition
	switch {
	case invalid != nil:
		cs = append(cs, cond(v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, "%v", invalid))
	case validates:
		cs = append(cs, cond(v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted, "every pattern compiles"))
	}
	if !refs.checked {
		return cs
	}
	if t == nil {
		t = &v1alpha1.Tenant{}
	}
	return append(cs, refsCondition(refs), inForceCondition(refs, t, kind, obj.GetName(), obj.GetGeneration(), nil))
}

// SetupWithManager registers the reconciler and its watches: the object's
// spec, and those r.watch adds.
func (r *referenceReconciler[T]) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).For(r.newObject(), builder.WithPredicates(specChanged))
	return r.watch(b).Complete(observed{kind: r.kind, inner: r})
}

// tenantRequests maps a Tenant whose in-force state may have changed to
// the objects names lists for it.
func tenantRequests(names func(ctx context.Context, ns, tenant string) ([]string, error)) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		ns, err := names(ctx, o.GetNamespace(), o.GetName())
		if err != nil {
			return nil
		}
		return requestsFor(o.GetNamespace(), ns...)
	}
}
