package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/storybus/storybus/api/v1alpha1"
)

// +kubebuilder:rbac:groups=bus.storybus.io,resources=grants,verbs=get;list;watch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=grants/status,verbs=get;patch

// grantReferences checks a Grant's Connection and its Tenant exist, and
// whether the Tenant's configuration serves the Grant.
func grantReferences(c client.Client, rec events.EventRecorder) *referenceReconciler[*v1alpha1.Grant] {
	r := &referenceReconciler[*v1alpha1.Grant]{
		Client:    c,
		Recorder:  rec,
		kind:      "Grant",
		newObject: func() *v1alpha1.Grant { return &v1alpha1.Grant{} },
		tenantOf:  grantTenant(c),
		setTenant: func(g *v1alpha1.Grant, tenant string) { g.Status.Tenant = tenant },
		summary:   []string{v1alpha1.ConditionResolvedRefs, v1alpha1.ConditionInForce},
	}
	grantsOf := func(ctx context.Context, ns, conn string) ([]string, error) {
		gs, err := grantsOfConnection(ctx, c, ns, conn)
		var names []string
		for _, g := range gs {
			names = append(names, g.Name)
		}
		return names, err
	}
	r.watch = func(b *builder.Builder) *builder.Builder {
		return b.
			Watches(&v1alpha1.Connection{}, handler.EnqueueRequestsFromMapFunc(tenantRequests(grantsOf)),
				builder.WithPredicates(specChanged)).
			Watches(&v1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(tenantRequests(func(ctx context.Context, ns, tenant string) ([]string, error) {
				conns, err := connectionsOfTenant(ctx, c, ns, tenant)
				if err != nil {
					return nil, err
				}
				var names []string
				for _, conn := range conns {
					gs, err := grantsOf(ctx, ns, conn.Name)
					if err != nil {
						return nil, err
					}
					names = append(names, gs...)
				}
				return names, nil
			})), builder.WithPredicates(tenantInForceChanged))
	}
	return r
}

// grantTenant resolves a Grant's Tenant through its Connection.
func grantTenant(c client.Reader) func(context.Context, *v1alpha1.Grant) (string, refsObservation, error) {
	return func(ctx context.Context, g *v1alpha1.Grant) (string, refsObservation, error) {
		conn := &v1alpha1.Connection{}
		err := c.Get(ctx, types.NamespacedName{Namespace: g.Namespace, Name: g.Spec.ConnectionRef.Name}, conn)
		switch {
		case apierrors.IsNotFound(err):
			return "", refsObservation{checked: true, reason: v1alpha1.ReasonConnectionNotFound,
				message: fmt.Sprintf("Connection %s not found in namespace %s", g.Spec.ConnectionRef.Name, g.Namespace)}, nil
		case err != nil:
			return "", refsObservation{}, fmt.Errorf("get connection: %w", err)
		}
		return conn.Spec.TenantRef.Name, refsObservation{}, nil
	}
}
