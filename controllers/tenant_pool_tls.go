package controllers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
)

// A pooled Tenant with spec.tls brings its own key pair to replicas that
// serve every workspace of the pool over one HTTPS port: the pool
// controller puts the pair into the workspace's document with the host
// names the replicas present it for (SNI). A Tenant may claim the host
// names its certificate covers, but not the pool Service's, and not one
// an older Tenant on the pool holds (the oldest wins, as Gateway API
// resolves conflicting routes); the replicas add their own rule, that no
// workspace is presented for a name the pool's own certificate covers.

// errNoKeyPair stops the placing of a Tenant whose key pair is not (yet)
// in its Secret: its workspace is placed once it is.
type errNoKeyPair struct{ why string }

func (e errNoKeyPair) Error() string { return e.why }

// keyPair is the workspace's own key pair for its document, or nil
// without spec.tls or when none of its host names is its to claim; taken
// lists the names it does not get, and who holds them.
func (r *TenantPoolReconciler) keyPair(ctx context.Context, s *poolScope) (pair *config.WorkspaceTLS, taken []string, err error) {
	t := s.tenant
	name := tlsSecretName(t)
	if name == "" {
		return nil, nil, nil
	}
	if s.pool.Spec.TLS == nil {
		return nil, nil, errNoKeyPair{"its pool serves HTTPS: BusPool " + s.pool.Namespace + "/" + s.pool.Name +
			" serves plain HTTP, and its replicas present a Tenant's own key pair (spec.tls) only beside a pair of the pool's (its spec.tls)"}
	}
	sec := &corev1.Secret{}
	switch err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: name}, sec); {
	case apierrors.IsNotFound(err):
		return nil, nil, errNoKeyPair{fmt.Sprintf("its key pair (spec.tls) is not in Secret %s yet", name)}
	case err != nil:
		return nil, nil, fmt.Errorf("get tls secret %s: %w", name, err)
	}
	cert, key := sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey]
	parsed, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, nil, errNoKeyPair{fmt.Sprintf("Secret %s holds no usable key pair (spec.tls): %v", name, err)}
	}
	holders, err := r.hostHolders(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	reserved := poolServiceNames(s.pool, r.ClusterDomain)
	var hosts []string
	for _, n := range parsed.Leaf.DNSNames {
		n = strings.ToLower(n)
		switch {
		case slices.Contains(hosts, n), len(hosts) == config.MaxTLSHosts:
		case slices.Contains(reserved, n):
			taken = append(taken, n+" (the pool Service's)")
		case holders[n] != "":
			taken = append(taken, n+" (held by Tenant "+holders[n]+")")
		default:
			hosts = append(hosts, n)
		}
	}
	if len(hosts) == 0 {
		return nil, taken, nil
	}
	return &config.WorkspaceTLS{Certificate: string(cert), Key: string(key), Hosts: hosts}, taken, nil
}

// hostHolders returns the host names the Tenants on s's pool older than
// s's own hold (status.pool.hostNames), with the holder's namespace/name.
func (r *TenantPoolReconciler) hostHolders(ctx context.Context, s *poolScope) (map[string]string, error) {
	key := types.NamespacedName{Namespace: s.pool.Namespace, Name: s.pool.Name}
	var l v1alpha1.TenantList
	if err := r.List(ctx, &l, client.MatchingFields{indexTenantPool: key.String()}); err != nil {
		return nil, fmt.Errorf("list the tenants of buspool %s: %w", key, err)
	}
	out := map[string]string{}
	for i := range l.Items {
		o := &l.Items[i]
		if o.UID == s.tenant.UID || !placedOn(o, key) || !olderThan(o, s.tenant) {
			continue
		}
		for _, n := range o.Status.Pool.HostNames {
			out[n] = o.Namespace + "/" + o.Name
		}
	}
	return out, nil
}

// olderThan reports whether a was created before b, or at the same second
// and is first by namespace and name: the order conflicting claims are
// decided in.
func olderThan(a, b *v1alpha1.Tenant) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// poolServiceNames are the in-cluster names of p's Service, which no
// Tenant may claim.
func poolServiceNames(p *v1alpha1.BusPool, clusterDomain string) []string {
	return serviceDNSNames(poolObjectName(p), p.Namespace, clusterDomain)
}

// tenantHostNamesChanged passes the Tenant events that can change which
// Tenant of a pool holds a host name: a key pair's host names given or
// taken, spec.tls or spec.pool changed, a Tenant created or deleted.
var tenantHostNamesChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld.(*v1alpha1.Tenant), e.ObjectNew.(*v1alpha1.Tenant)
		return specChanged.Update(e) || !slices.Equal(hostNamesOf(old), hostNamesOf(cur))
	},
}

func hostNamesOf(t *v1alpha1.Tenant) []string {
	if t.Status.Pool == nil {
		return nil
	}
	return t.Status.Pool.HostNames
}

// keyPairTenantsOnPool maps a Tenant to the other Tenants with a key pair
// of their own on the pools it names or is on: one that yielded a host
// name may now have it, one that holds a name an older Tenant claims now
// yields it.
func (r *TenantPoolReconciler) keyPairTenantsOnPool(ctx context.Context, o client.Object) []reconcile.Request {
	t := o.(*v1alpha1.Tenant)
	if t.Spec.TLS == nil && len(hostNamesOf(t)) == 0 {
		return nil
	}
	var out []reconcile.Request
	for _, k := range tenantPools(t) {
		var l v1alpha1.TenantList
		if err := r.List(ctx, &l, client.MatchingFields{indexTenantPool: k.String()}); err != nil {
			return nil
		}
		for i := range l.Items {
			if other := &l.Items[i]; other.UID != t.UID && other.Spec.TLS != nil {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(other)})
			}
		}
	}
	return out
}

// tenantsOfKeyPairSecret maps a Secret to the pooled Tenants whose key
// pair it holds: spec.tls.secretName, or the <tenant>-tls of an issuerRef
// Tenant's Certificate.
func tenantsOfKeyPairSecret(ctx context.Context, c client.Reader, o client.Object) []string {
	names := tenantsOfTLSSecret(ctx, c, o)
	if tenant, ok := strings.CutSuffix(o.GetName(), "-tls"); ok {
		t := &v1alpha1.Tenant{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: tenant}, t); err == nil && tlsSecretName(t) == o.GetName() {
			names = append(names, t.Name)
		}
	}
	return names
}

// isNoKeyPair reports whether err is errNoKeyPair.
func isNoKeyPair(err error) bool {
	var e errNoKeyPair
	return errors.As(err, &e)
}
