package controllers

import (
	"context"

	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/controllers/workspace"
)

// +kubebuilder:rbac:groups=bus.storybus.io,resources=ownershippolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=bus.storybus.io,resources=ownershippolicies/status,verbs=get;patch

// ownershipPolicyReferences checks an OwnershipPolicy's patterns compile
// and its Tenant exists, and whether the Tenant's configuration serves it.
func ownershipPolicyReferences(c client.Client, rec events.EventRecorder) *referenceReconciler[*v1alpha1.OwnershipPolicy] {
	return &referenceReconciler[*v1alpha1.OwnershipPolicy]{
		Client:    c,
		Recorder:  rec,
		kind:      "OwnershipPolicy",
		newObject: func() *v1alpha1.OwnershipPolicy { return &v1alpha1.OwnershipPolicy{} },
		tenantOf: func(_ context.Context, p *v1alpha1.OwnershipPolicy) (string, refsObservation, error) {
			return p.Spec.TenantRef.Name, refsObservation{}, nil
		},
		validate: func(p *v1alpha1.OwnershipPolicy) error { return workspace.ValidateOwnershipPolicy(&p.Spec) },
		summary:  []string{v1alpha1.ConditionAccepted, v1alpha1.ConditionResolvedRefs, v1alpha1.ConditionInForce},
		watch: func(b *builder.Builder) *builder.Builder {
			return b.Watches(&v1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(tenantRequests(func(ctx context.Context, ns, tenant string) ([]string, error) {
				ps, err := policiesOfTenant(ctx, c, ns, tenant)
				var names []string
				for _, p := range ps {
					names = append(names, p.Name)
				}
				return names, err
			})), builder.WithPredicates(tenantInForceChanged))
		},
	}
}
