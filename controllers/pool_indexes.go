package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/storybus/storybus/api/v1alpha1"
)

// Field indexes of the pools.
const (
	// indexTenantPool indexes Tenants by the BusPool they name
	// (spec.pool) and the one their document is in (status.pool), as
	// <namespace>/<name>.
	indexTenantPool = "pool"
	// indexPoolWorkspace indexes Tenants by the same pools and their
	// workspace id, as <namespace>/<name>/<workspace>: the Tenants that
	// would share one key of a pool's bucket.
	indexPoolWorkspace = "poolWorkspace"
	// indexPooledWorkspace indexes the Tenants that name a pool or are
	// placed on one by their workspace id: those whose streams live on a
	// pool's cluster, where a Tenant of its own on external storage may
	// use the same id.
	indexPooledWorkspace = "pooledWorkspaceID"
	// indexPoolSecrets indexes BusPools by the Secrets they name: their
	// NATS credentials and TLS key pair.
	indexPoolSecrets = "poolSecrets"
	// indexPlacedOn is an index of the Tenants' informer, not a field
	// index: Tenants by the pool their document is in (status.pool), as
	// <namespace>/<name>, counted by its keys (tenantsPlacedOn).
	indexPlacedOn = "placedOnPool"
)

// addPlacedIndex adds indexPlacedOn to the Tenants' informer of c.
func addPlacedIndex(ctx context.Context, c cache.Cache) error {
	informer, err := c.GetInformer(ctx, &v1alpha1.Tenant{})
	if err != nil {
		return err
	}
	return informer.AddIndexers(toolscache.Indexers{indexPlacedOn: func(raw any) ([]string, error) {
		t, ok := raw.(*v1alpha1.Tenant)
		if !ok || t.Status.Pool == nil {
			return nil, nil
		}
		return []string{types.NamespacedName{Namespace: t.Status.Pool.Namespace, Name: t.Status.Pool.Name}.String()}, nil
	}})
}

// tenantsPlacedOn counts the Tenants whose document is in pool. It reads
// the keys of the Tenants' index, copying no Tenant: a pool's reconcile
// counts them, and listing them was, with 1,000 Tenants on a pool, a copy
// of every Tenant for each reconcile. A cache whose informers keep no
// index of their own (one confined to namespaces) lists them instead.
func tenantsPlacedOn(ctx context.Context, c cache.Cache, r client.Reader, pool types.NamespacedName) (int, error) {
	informer, err := c.GetInformer(ctx, &v1alpha1.Tenant{})
	if err != nil {
		return 0, err
	}
	if indexed, ok := informer.(interface{ GetIndexer() toolscache.Indexer }); ok {
		keys, err := indexed.GetIndexer().IndexKeys(indexPlacedOn, pool.String())
		return len(keys), err
	}
	tenants, err := tenantsNamingPool(ctx, r, pool)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tenants {
		if pl := t.Status.Pool; pl != nil && pl.Namespace == pool.Namespace && pl.Name == pool.Name {
			n++
		}
	}
	return n, nil
}

func addPoolIndexes(ctx context.Context, fi client.FieldIndexer) error {
	if err := fi.IndexField(ctx, &v1alpha1.Tenant{}, indexTenantPool, func(o client.Object) []string {
		var out []string
		for _, k := range tenantPools(o.(*v1alpha1.Tenant)) {
			out = append(out, k.String())
		}
		return out
	}); err != nil {
		return err
	}
	if err := fi.IndexField(ctx, &v1alpha1.Tenant{}, indexPoolWorkspace, func(o client.Object) []string {
		t := o.(*v1alpha1.Tenant)
		var out []string
		for _, k := range tenantPools(t) {
			out = append(out, poolWorkspaceKey(k, t.EffectiveWorkspaceID()))
		}
		return out
	}); err != nil {
		return err
	}
	if err := fi.IndexField(ctx, &v1alpha1.Tenant{}, indexPooledWorkspace, func(o client.Object) []string {
		t := o.(*v1alpha1.Tenant)
		if len(tenantPools(t)) == 0 {
			return nil
		}
		return []string{t.EffectiveWorkspaceID()}
	}); err != nil {
		return err
	}
	return fi.IndexField(ctx, &v1alpha1.BusPool{}, indexPoolSecrets, func(o client.Object) []string {
		p := o.(*v1alpha1.BusPool)
		var out []string
		if ref := p.Spec.NATS.CredentialsSecretRef; ref != nil {
			out = append(out, ref.Name)
		}
		if p.Spec.TLS != nil {
			out = append(out, p.Spec.TLS.SecretName)
		}
		return out
	})
}

// tenantPools are the pools t names and is placed on, without duplicates.
func tenantPools(t *v1alpha1.Tenant) []types.NamespacedName {
	var out []types.NamespacedName
	if ns, name, ok := t.PoolKey(); ok {
		out = append(out, types.NamespacedName{Namespace: ns, Name: name})
	}
	if pl := t.Status.Pool; pl != nil {
		k := types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name}
		if len(out) == 0 || out[0] != k {
			out = append(out, k)
		}
	}
	return out
}

// poolWorkspaceKey is the indexPoolWorkspace value of workspace ws on pool.
func poolWorkspaceKey(pool types.NamespacedName, ws string) string {
	return pool.String() + "/" + ws
}

// tenantsNamingPool lists the Tenants, in every namespace, that name pool
// or are placed on it: the cache's own, to be read only (a pool's
// reconcile lists every Tenant on it, and copying them was, with 1,000
// Tenants on a pool, a copy of a Tenant for each Tenant and reconcile).
func tenantsNamingPool(ctx context.Context, c client.Reader, pool types.NamespacedName) ([]v1alpha1.Tenant, error) {
	var l v1alpha1.TenantList
	if err := c.List(ctx, &l, client.MatchingFields{indexTenantPool: pool.String()}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list the tenants of pool %s: %w", pool, err)
	}
	return l.Items, nil
}
