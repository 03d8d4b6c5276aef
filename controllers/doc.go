// Package controllers holds the operator's reconcilers, one per kind of
// api/v1alpha1:
//
//   - TenantReconciler runs a Tenant's bus: the compiled workspace
//     configuration (ConfigMap), the signing key (Secret), the bus pods
//     (StatefulSet), their Services and PodDisruptionBudget, and removes
//     stored data on deletion when the Tenant's deletionPolicy says so.
//   - ConnectionReconciler keeps a Connection's credentials Secret and
//     rotates the secret on request.
//   - GrantReconciler and OwnershipPolicyReconciler check references and
//     specs; the Tenant's reconciler folds them into its configuration.
//
// Every reconciler has the same shape: get the object (gone: nothing to
// do), defer one status patch, run ordered phases that share a scope
// struct, and compute conditions with pure functions of what the phases
// observed. A condition that changes is also recorded as an Event.
package controllers
