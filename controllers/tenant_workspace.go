package controllers

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
)

// claimWorkspace stops the reconcile when another Tenant holds the same
// workspace id on the same external NATS cluster: the workspace id names
// the streams and buckets there, so two buses would share each other's
// messages, records and limits. Embedded stores are per Tenant and never
// clash. Which Tenant holds the workspace is decided by workspaceClaim;
// the others report WorkspaceConflict and get no bus on that cluster until
// the holder is gone or moves.
func (r *TenantWorkloadReconciler) claimWorkspace(ctx context.Context, s *workloadScope) (ctrl.Result, error) {
	t := s.tenant
	if t.Spec.Storage == nil || t.Spec.Storage.External == nil {
		return ctrl.Result{}, nil
	}
	contested := t.Spec.Storage.External.URL
	others, err := r.rivals(ctx, t)
	if err != nil || len(others) == 0 {
		return ctrl.Result{}, err
	}
	self := claimant{tenant: t}
	if self.serving, err = busServesOn(ctx, r.Client, t, contested); err != nil {
		return ctrl.Result{}, err
	}
	holder, stop := workspaceClaim(self, others)
	if holder == nil {
		return ctrl.Result{}, nil
	}
	s.workspaceConflict = fmt.Errorf("workspace %s on %s is held by Tenant %s/%s; give this Tenant another spec.workspaceID",
		t.EffectiveWorkspaceID(), contested, holder.Namespace, holder.Name)
	if stop {
		if err := r.stopBus(ctx, t); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, terminal(s.workspaceConflict)
}

// rivals returns the other Tenants using t's workspace id on a cluster
// with a server in common with t's, on external storage or a pool, and
// whether each one already serves there.
func (r *TenantWorkloadReconciler) rivals(ctx context.Context, t *v1alpha1.Tenant) ([]claimant, error) {
	contested := t.Spec.Storage.External.URL
	external, err := externalRivals(ctx, r.Client, t, contested)
	if err != nil {
		return nil, err
	}
	pooled, err := pooledRivals(ctx, r.Client, t, contested)
	return append(external, pooled...), err
}

// pooledRivals returns the Tenants other than t with t's workspace id
// that name or are placed on a pool whose cluster has a server in common
// with contested, and whether each is placed there: a pool's replicas
// open the workspace's stream and buckets on that cluster by its id, as a
// bus of its own on external storage does.
func pooledRivals(ctx context.Context, c client.Reader, t *v1alpha1.Tenant, contested string) ([]claimant, error) {
	var l v1alpha1.TenantList
	if err := c.List(ctx, &l, client.MatchingFields{indexPooledWorkspace: t.EffectiveWorkspaceID()}); err != nil {
		return nil, fmt.Errorf("list the pooled tenants of workspace %s: %w", t.EffectiveWorkspaceID(), err)
	}
	var out []claimant
	for i := range l.Items {
		o := &l.Items[i]
		if o.UID == t.UID {
			continue
		}
		for _, key := range tenantPools(o) {
			p := &v1alpha1.BusPool{}
			switch err := c.Get(ctx, key, p); {
			case apierrors.IsNotFound(err):
				continue
			case err != nil:
				return nil, fmt.Errorf("get buspool %s: %w", key, err)
			}
			if shareServer(contested, p.Spec.NATS.URL) {
				out = append(out, claimant{tenant: o, serving: placedOn(o, key)})
				break
			}
		}
	}
	return out, nil
}

// externalRivals returns the Tenants other than t on external storage
// with t's workspace id and a server in common with contested, and
// whether each one's bus serves there.
func externalRivals(ctx context.Context, c client.Reader, t *v1alpha1.Tenant, contested string) ([]claimant, error) {
	var l v1alpha1.TenantList
	if err := c.List(ctx, &l, client.MatchingFields{indexExternalWorkspace: t.EffectiveWorkspaceID()}); err != nil {
		return nil, fmt.Errorf("list tenants of workspace %s: %w", t.EffectiveWorkspaceID(), err)
	}
	var out []claimant
	for i := range l.Items {
		o := &l.Items[i]
		// A Tenant naming a pool is served by the pool, not by the bus
		// of its own it is leaving.
		if o.UID == t.UID || o.Spec.Pool != nil || !shareServer(contested, o.Spec.Storage.External.URL) {
			continue
		}
		serving, err := busServesOn(ctx, c, o, contested)
		if err != nil {
			return nil, err
		}
		out = append(out, claimant{tenant: o, serving: serving})
	}
	return out, nil
}

// stopBus deletes t's bus StatefulSet.
func (r *TenantWorkloadReconciler) stopBus(ctx context.Context, t *v1alpha1.Tenant) error {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: busName(t)}}
	if err := r.Delete(ctx, sts); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("stop the bus: %w", err)
	}
	return nil
}

// claimant is a Tenant using a workspace id on an external cluster, and
// whether its bus already runs there.
type claimant struct {
	tenant  *v1alpha1.Tenant
	serving bool
}

// workspaceClaim decides whether self may run its bus on a cluster where
// others use the same workspace id. A bus already serving there keeps the
// workspace, so that no change to another Tenant (a new one, or an edited
// URL) can stop it; among Tenants not yet serving, the oldest goes first.
// Only when both self and another already serve (two Tenants created
// together, each before it saw the other) does the older keep it, and self
// must stop its bus. It returns the Tenant that holds the workspace, nil
// when self does, and whether self must stop its bus.
func workspaceClaim(self claimant, others []claimant) (holder *v1alpha1.Tenant, stop bool) {
	slices.SortFunc(others, func(a, b claimant) int {
		if createdBefore(a.tenant, b.tenant) {
			return -1
		}
		return 1
	})
	for _, o := range others {
		if o.serving && (!self.serving || createdBefore(o.tenant, self.tenant)) {
			return o.tenant, self.serving
		}
	}
	if self.serving {
		return nil, false
	}
	for _, o := range others {
		if createdBefore(o.tenant, self.tenant) {
			return o.tenant, false
		}
	}
	return nil, false
}

// busServesOn reports whether t's bus runs (its StatefulSet exists,
// controlled by t) against a server of the cluster at contested.
func busServesOn(ctx context.Context, c client.Reader, t *v1alpha1.Tenant, contested string) (bool, error) {
	sts := &appsv1.StatefulSet{}
	err := c.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: busName(t)}, sts)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get statefulset %s/%s: %w", t.Namespace, busName(t), err)
	case !controlledBy(sts, t):
		return false, nil
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if i := slices.Index(c.Args, "--nats-url"); i >= 0 && i+1 < len(c.Args) && shareServer(c.Args[i+1], contested) {
			return true, nil
		}
	}
	return false, nil
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
// server in common, and so the same cluster. Servers are compared by host
// and port (4222 when none is given), whatever the scheme or credentials.
func shareServer(a, b string) bool {
	servers := map[string]bool{}
	for u := range strings.SplitSeq(a, ",") {
		servers[serverAddress(u)] = true
	}
	for u := range strings.SplitSeq(b, ",") {
		if servers[serverAddress(u)] {
			return true
		}
	}
	return false
}

// serverAddress returns a NATS URL's host:port, lower case.
func serverAddress(raw string) string {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return strings.ToLower(raw)
	}
	port := u.Port()
	if port == "" {
		port = "4222"
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// sameWorkspaceTenants maps a Tenant to the other Tenants on external
// storage with its workspace id, so that one that waits on a conflict is
// reconciled when the Tenant ahead of it (on external storage or a pool)
// changes, is placed, or goes.
func (r *TenantWorkloadReconciler) sameWorkspaceTenants(ctx context.Context, o client.Object) []reconcile.Request {
	return otherTenantsOf(ctx, r.Client, o.(*v1alpha1.Tenant), indexExternalWorkspace)
}

// otherTenantsOf lists the Tenants other than t with t's workspace id in
// the workspace index named, as requests.
func otherTenantsOf(ctx context.Context, c client.Reader, t *v1alpha1.Tenant, index string) []reconcile.Request {
	var l v1alpha1.TenantList
	if err := c.List(ctx, &l, client.MatchingFields{index: t.EffectiveWorkspaceID()}); err != nil {
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
