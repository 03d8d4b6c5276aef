package controllers

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/controllers/workspace"
)

// OwnershipPolicyReconciler checks an OwnershipPolicy's Tenant exists and
// its patterns compile; the Tenant's reconciler folds it into the
// workspace configuration.
type OwnershipPolicyReconciler struct {
	client.Client
	// Recorder records Events on the OwnershipPolicy.
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=bus.storybus.io,resources=ownershippolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=ownershippolicies/status,verbs=get;patch

// Reconcile reports whether one OwnershipPolicy is valid and resolves.
func (r *OwnershipPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	p := &v1alpha1.OwnershipPolicy{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get ownership policy: %w", err)
	}
	before := p.DeepCopy()
	var refs refsObservation
	var t *v1alpha1.Tenant
	invalid := workspace.ValidateOwnershipPolicy(&p.Spec)
	defer func() {
		setConditions(p, p.Generation, ownershipPolicyConditions(refs, invalid, t, p),
			v1alpha1.ConditionAccepted, v1alpha1.ConditionResolvedRefs, v1alpha1.ConditionInForce)
		err = errors.Join(err, patchStatus(ctx, r.Client, r.Recorder, p, before))
	}()
	if refs, t, err = resolveTenant(ctx, r.Client, p.Namespace, p.Spec.TenantRef.Name); err != nil {
		return ctrl.Result{}, err
	}
	if invalid != nil {
		return ctrl.Result{}, reconcile.TerminalError(invalid)
	}
	return ctrl.Result{}, nil
}

// ownershipPolicyConditions returns the conditions an OwnershipPolicy's
// checks decide against its Tenant t (nil when not found), Ready excluded.
func ownershipPolicyConditions(refs refsObservation, invalid error, t *v1alpha1.Tenant, p *v1alpha1.OwnershipPolicy) []metav1.Condition {
	var cs []metav1.Condition
	if invalid != nil {
		cs = append(cs, cond(v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, "%v", invalid))
	} else {
		cs = append(cs, cond(v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonAccepted, "every pattern compiles"))
	}
	if refs.checked {
		cs = append(cs, refsCondition(refs), dependentInForce(refs, t, "OwnershipPolicy", p.Name, p.Generation))
	}
	return cs
}

// SetupWithManager registers the reconciler and its watches.
func (r *OwnershipPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.OwnershipPolicy{}, builder.WithPredicates(specChanged)).
		Watches(&v1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			ps, err := policiesOfTenant(ctx, r.Client, o.GetNamespace(), o.GetName())
			if err != nil {
				return nil
			}
			var names []string
			for _, p := range ps {
				names = append(names, p.Name)
			}
			return requestsFor(o.GetNamespace(), names...)
		}), builder.WithPredicates(tenantInForceChanged)).
		Complete(observed{kind: "OwnershipPolicy", inner: r})
}
