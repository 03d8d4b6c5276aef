// Package controllers holds the operator's controllers:
//
//   - TenantConfigurationReconciler compiles a Tenant and what refers to it
//     (package workspace) into its workspace configuration (a ConfigMap) and
//     a Secret with the signing key and the files the configuration names.
//   - TenantWorkloadReconciler runs the Tenant's bus once that configuration
//     is valid: its StatefulSet, Services, PodDisruptionBudget, volumes,
//     NetworkPolicy, TLS Certificate, HTTPRoute or Ingress and PodMonitor;
//     on deletion it removes stored data when the deletionPolicy says so.
//   - TenantReadinessReconciler writes only status: whether the bus's pods
//     are ready and have loaded the configuration compiled.
//   - ConnectionCredentialsReconciler keeps a Connection's credentials
//     Secret and rotates its secret on request; ConnectionReconciler
//     writes only the Connection's status: its references, its Secret,
//     and whether its Tenant serves it.
//   - One reference reconciler each for Grants and OwnershipPolicies says
//     whether what they name resolves and whether they are in force; the
//     configuration reconciler folds them in.
//   - BusPoolReconciler runs a BusPool's replicas (a StatefulSet of
//     storybus serve --pool, Services, a PodDisruptionBudget, a route) and
//     reports what each replica has in force, read through poolClients'
//     connection to the pool's NATS cluster.
//   - TenantPoolReconciler places a Tenant that names a pool: it writes the
//     compiled configuration into the pool's bucket, decides the Tenant's
//     readiness from what the pool's replicas report, and removes it from
//     the pool when it leaves or is deleted.
//
// A reconciler gets its object (gone: nothing to do), observes or acts in
// ordered phases that share a scope struct, computes conditions with pure
// functions of what it observed, and writes its part of the status only
// when it changed. A condition that changes is also recorded as an Event.
package controllers
