package controllers

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
)

// claimWorkspace stops the reconcile when an older Tenant already uses the
// same workspace id on the same external NATS cluster: the workspace id
// names the streams and buckets there, so two buses would share each
// other's messages, records and limits. Embedded stores are per Tenant and
// never clash. The older Tenant keeps the workspace; this one reports
// WorkspaceConflict and gets no bus until the other is gone or moved. A bus
// it already runs (two Tenants created in the same second, whose order
// only their names decide) is stopped: its StatefulSet is deleted.
func (r *TenantReconciler) claimWorkspace(ctx context.Context, s *tenantScope) error {
	t := s.tenant
	if t.Spec.Storage == nil || t.Spec.Storage.External == nil {
		return nil
	}
	var l v1alpha1.TenantList
	if err := r.List(ctx, &l, client.MatchingFields{indexExternalWorkspace: t.EffectiveWorkspaceID()}); err != nil {
		return fmt.Errorf("list tenants of workspace %s: %w", t.EffectiveWorkspaceID(), err)
	}
	for i := range l.Items {
		other := &l.Items[i]
		if other.UID == t.UID || !other.DeletionTimestamp.IsZero() || !createdBefore(other, t) ||
			!shareServer(t.Spec.Storage.External.URL, other.Spec.Storage.External.URL) {
			continue
		}
		s.workspaceConflict = fmt.Errorf("workspace %s on %s is already used by Tenant %s/%s; give this Tenant another spec.workspaceID",
			t.EffectiveWorkspaceID(), other.Spec.Storage.External.URL, other.Namespace, other.Name)
		sts := &appsv1.StatefulSet{}
		err := r.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: busName(t)}, sts)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("get statefulset: %w", err)
		case controlledBy(sts, t):
			if err := r.Delete(ctx, sts); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("stop the bus of a conflicting workspace: %w", err)
			}
		}
		return reconcile.TerminalError(s.workspaceConflict)
	}
	return nil
}

// createdBefore orders Tenants by creation, then by namespace and name, so
// that of two Tenants exactly one is first.
func createdBefore(a, b *v1alpha1.Tenant) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// shareServer reports whether two NATS URL lists (comma-separated) name a
// server in common, and so the same cluster.
func shareServer(a, b string) bool {
	servers := map[string]bool{}
	for u := range strings.SplitSeq(a, ",") {
		servers[normalizeServer(u)] = true
	}
	for u := range strings.SplitSeq(b, ",") {
		if servers[normalizeServer(u)] {
			return true
		}
	}
	return false
}

func normalizeServer(u string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(u)), "/")
}

// sameWorkspaceTenants maps a Tenant to the other Tenants on external
// storage with its workspace id, so that one that waits on a conflict is
// reconciled when the Tenant ahead of it changes or goes.
func (r *TenantReconciler) sameWorkspaceTenants(ctx context.Context, o client.Object) []reconcile.Request {
	t := o.(*v1alpha1.Tenant)
	var l v1alpha1.TenantList
	if err := r.List(ctx, &l, client.MatchingFields{indexExternalWorkspace: t.EffectiveWorkspaceID()}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, other := range l.Items {
		if other.UID != t.UID {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&other)})
		}
	}
	return reqs
}
