package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/storybus/storybus/api/v1alpha1"
)

// The field managers that add the operator's finalizers to a Tenant.
const (
	workloadFinalizerOwner = "storybus-operator-workload"
	poolFinalizerOwner     = "storybus-operator-pool"
)

// addTenantFinalizer adds finalizer to t by server-side apply, as field
// manager owner. Finalizers are a set that several managers apply to
// without conflict: the workload and pool controllers each add theirs to
// a new Tenant at the same moment, and a merge patch with an optimistic
// lock made one of the two fail and retry with backoff, hundreds of times
// in a burst of creates.
func addTenantFinalizer(ctx context.Context, c client.Client, t *v1alpha1.Tenant, finalizer, owner string) error {
	if controllerutil.ContainsFinalizer(t, finalizer) {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Tenant"))
	u.SetNamespace(t.Namespace)
	u.SetName(t.Name)
	u.SetUID(t.UID) // the Tenant read, not one created again since
	u.SetFinalizers([]string{finalizer})
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("add finalizer %s: %w", finalizer, err)
	}
	// The answer's version with the answer's finalizers: the other
	// manager's, added meanwhile, must not be patched away from a stale
	// list under the new version's lock.
	if rv := u.GetResourceVersion(); rv != "" {
		t.ResourceVersion, t.Finalizers = rv, u.GetFinalizers()
	}
	controllerutil.AddFinalizer(t, finalizer)
	return nil
}
