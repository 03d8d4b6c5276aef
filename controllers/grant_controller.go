package controllers

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
)

// GrantReconciler checks a Grant's Connection and Tenant exist; the
// Tenant's reconciler folds the Grant into the workspace configuration.
type GrantReconciler struct {
	client.Client
	// Recorder records Events on the Grant.
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=bus.storybus.io,resources=grants,verbs=get;list;watch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=grants/status,verbs=get;patch

// Reconcile reports whether one Grant's references resolve.
func (r *GrantReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	g := &v1alpha1.Grant{}
	if err := r.Get(ctx, req.NamespacedName, g); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get grant: %w", err)
	}
	before := g.DeepCopy()
	var refs refsObservation
	tenant := ""
	var t *v1alpha1.Tenant
	defer func() {
		g.Status.Tenant = tenant
		setConditions(g, g.Generation, grantConditions(refs, t, g), v1alpha1.ConditionResolvedRefs, v1alpha1.ConditionInForce)
		err = errors.Join(err, patchStatus(ctx, r.Client, r.Recorder, g, before))
	}()
	c := &v1alpha1.Connection{}
	err = r.Get(ctx, types.NamespacedName{Namespace: g.Namespace, Name: g.Spec.ConnectionRef.Name}, c)
	switch {
	case apierrors.IsNotFound(err):
		refs = refsObservation{checked: true, reason: v1alpha1.ReasonConnectionNotFound,
			message: fmt.Sprintf("Connection %s not found in namespace %s", g.Spec.ConnectionRef.Name, g.Namespace)}
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get connection: %w", err)
	}
	tenant = c.Spec.TenantRef.Name
	if refs, t, err = resolveTenant(ctx, r.Client, g.Namespace, tenant); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// grantConditions returns the conditions a Grant's reference check
// decides against its Tenant t (nil when not found), Ready excluded.
func grantConditions(refs refsObservation, t *v1alpha1.Tenant, g *v1alpha1.Grant) []metav1.Condition {
	if !refs.checked {
		return nil
	}
	return []metav1.Condition{refsCondition(refs), dependentInForce(refs, t, "Grant", g.Name, g.Generation)}
}

// dependentInForce is the InForce condition of a Grant or OwnershipPolicy
// of Tenant t (nil when it was not found).
func dependentInForce(refs refsObservation, t *v1alpha1.Tenant, kind, name string, gen int64) metav1.Condition {
	if t == nil {
		t = &v1alpha1.Tenant{}
	}
	return inForceCondition(refs, t, kind, name, gen, nil)
}

// SetupWithManager registers the reconciler and its watches.
func (r *GrantReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Grant{}, builder.WithPredicates(specChanged)).
		Watches(&v1alpha1.Connection{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.grantsOf(ctx, o.GetNamespace(), o.GetName())
		}), builder.WithPredicates(specChanged)).
		Watches(&v1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			conns, err := connectionsOfTenant(ctx, r.Client, o.GetNamespace(), o.GetName())
			if err != nil {
				return nil
			}
			var out []reconcile.Request
			for _, c := range conns {
				out = append(out, r.grantsOf(ctx, o.GetNamespace(), c.Name)...)
			}
			return out
		}), builder.WithPredicates(tenantInForceChanged)).
		Complete(observed{kind: "Grant", inner: r})
}

func (r *GrantReconciler) grantsOf(ctx context.Context, ns, conn string) []reconcile.Request {
	gs, err := grantsOfConnection(ctx, r.Client, ns, conn)
	if err != nil {
		return nil
	}
	var names []string
	for _, g := range gs {
		names = append(names, g.Name)
	}
	return requestsFor(ns, names...)
}
