package controllers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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
// names its certificate covers, but none that overlaps (is, covers, or is
// covered by) the pool Service's names or the pool's exposed host names,
// nor one another Tenant on the pool holds: a name is its holder's until
// the holder gives it up (first come, first served), and of two Tenants
// that both came to hold one at the same moment, the older keeps it. The
// replicas add their own rule, that no workspace is presented for a name
// the pool's own certificate covers.

// errNoKeyPair stops the placing of a Tenant whose key pair is not (yet)
// in its Secret: its workspace is placed once it is. Its text completes
// "the workspace is placed once …".
type errNoKeyPair struct{ why string }

func (e errNoKeyPair) Error() string { return e.why }

// keyPair is the workspace's own key pair for its document, or nil
// without spec.tls, on a pool serving plain HTTP, or when none of its
// host names is its to claim; note says, for PoolReady, which host names
// it is presented for and which not, and why.
func (r *TenantPoolReconciler) keyPair(ctx context.Context, s *poolScope) (pair *config.WorkspaceTLS, note string, err error) {
	t := s.tenant
	name := tlsSecretName(t)
	if name == "" {
		return nil, "", nil
	}
	if s.pool.Spec.TLS == nil {
		return nil, "; its key pair (spec.tls) is not presented: BusPool " + s.pool.Namespace + "/" + s.pool.Name + " serves plain HTTP (it has no spec.tls)", nil
	}
	sec := &corev1.Secret{}
	switch err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: name}, sec); {
	case apierrors.IsNotFound(err):
		return nil, "", errNoKeyPair{fmt.Sprintf("its key pair (spec.tls) is in Secret %s, which does not exist yet", name)}
	case err != nil:
		return nil, "", fmt.Errorf("get tls secret %s: %w", name, err)
	}
	cert, key := sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey]
	parsed, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, "", errNoKeyPair{fmt.Sprintf("Secret %s holds a usable key pair (spec.tls); now: %v", name, err)}
	}
	holders, err := r.hostHolders(ctx, s)
	if err != nil {
		return nil, "", err
	}
	reserved := append(poolServiceNames(s.pool, r.ClusterDomain), exposeHostnames(s.pool.Spec.Expose)...)
	reserved = append(reserved, r.poolCertificateNames(ctx, s.pool)...)
	admitted, bounded := s.pool.AdmittedHostnames(t.Namespace)
	var hosts, taken []string
	seen := map[string]bool{}
	for _, n := range parsed.Leaf.DNSNames {
		n = strings.ToLower(n)
		if seen[n] {
			continue
		}
		seen[n] = true
		if bounded && !config.Covers(admitted, n) {
			taken = append(taken, n+" (not among the host names BusPool "+s.pool.Namespace+"/"+s.pool.Name+" admits for namespace "+t.Namespace+")")
			continue
		}
		if why := claimRefused(t, n, reserved, holders); why != "" {
			taken = append(taken, n+" ("+why+")")
			continue
		}
		if len(hosts) == config.MaxTLSHosts {
			taken = append(taken, fmt.Sprintf("%s (over %d host names)", n, config.MaxTLSHosts))
			continue
		}
		hosts = append(hosts, n)
	}
	if len(hosts) > 0 {
		pair = &config.WorkspaceTLS{Certificate: string(cert), Key: string(key), Hosts: hosts}
	}
	return pair, keyPairNote(pair, taken), nil
}

// poolCertificateNames are the DNS names of the pool's own certificate,
// which its replicas answer with its own pair whatever a document says;
// none when it cannot be read now (the replicas still keep them).
func (r *TenantPoolReconciler) poolCertificateNames(ctx context.Context, p *v1alpha1.BusPool) []string {
	sec := &corev1.Secret{}
	if err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.TLS.SecretName}, sec); err != nil {
		return nil
	}
	leaf, err := leafCertificate(sec.Data[corev1.TLSCertKey])
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(leaf.DNSNames))
	for _, n := range leaf.DNSNames {
		names = append(names, strings.ToLower(n))
	}
	return names
}

// maxNoted bounds the host names PoolReady lists as not presented: a
// certificate of hundreds of names must not take a condition's message
// over its limit.
const maxNoted = 10

// keyPairNote is what PoolReady says of the Tenant's own key pair: the
// host names it is presented for, and those it is not, and why.
func keyPairNote(pair *config.WorkspaceTLS, taken []string) string {
	if len(taken) > maxNoted {
		taken = append(taken[:maxNoted:maxNoted], fmt.Sprintf("and %d more", len(taken)-maxNoted))
	}
	switch {
	case pair == nil && len(taken) == 0:
		return "; its key pair (spec.tls) is not presented: its certificate names no host"
	case pair == nil:
		return "; its key pair (spec.tls) is not presented, for no host name is its: not for " + strings.Join(taken, ", ")
	case len(taken) == 0:
		return "; its key pair is presented for " + strings.Join(pair.Hosts, ", ")
	}
	return "; its key pair is presented for " + strings.Join(pair.Hosts, ", ") + "; not for " + strings.Join(taken, ", ") + ": the pool's key pair answers those"
}

// claimRefused says why t may not claim host name n, or "" when it may:
// n is not a host name a document may name, overlaps one of reserved, or
// overlaps a name another Tenant holds and keeps.
func claimRefused(t *v1alpha1.Tenant, n string, reserved []string, holders []hostHolder) string {
	if !config.ValidHost(n) {
		return "not a lower-case host name a key pair is presented for"
	}
	for _, r := range reserved {
		if config.Overlap(n, r) {
			return "the pool's own: " + r
		}
	}
	held := slices.Contains(hostNamesOf(t), n)
	for _, h := range holders {
		for _, m := range h.names {
			// A name the Tenant holds too is the older's; any other is
			// its holder's.
			if config.Overlap(n, m) && (!held || olderThan(h.tenant, t)) {
				return "held by Tenant " + h.tenant.Namespace + "/" + h.tenant.Name + " as " + m
			}
		}
	}
	return ""
}

// hostHolder is another Tenant on the pool and the host names it holds.
type hostHolder struct {
	tenant *v1alpha1.Tenant
	names  []string
}

// hostHolders returns the other Tenants placed on s's pool that hold host
// names (status.pool.hostNames), but those being deleted: their document
// is removed first, and the replicas present a name two documents claim
// for neither.
func (r *TenantPoolReconciler) hostHolders(ctx context.Context, s *poolScope) ([]hostHolder, error) {
	key := types.NamespacedName{Namespace: s.pool.Namespace, Name: s.pool.Name}
	var l v1alpha1.TenantList
	if err := r.List(ctx, &l, client.MatchingFields{indexTenantPool: key.String()}); err != nil {
		return nil, fmt.Errorf("list the tenants of buspool %s: %w", key, err)
	}
	var out []hostHolder
	for i := range l.Items {
		o := &l.Items[i]
		if o.UID == s.tenant.UID || !placedOn(o, key) || !o.DeletionTimestamp.IsZero() || len(o.Status.Pool.HostNames) == 0 {
			continue
		}
		out = append(out, hostHolder{tenant: o, names: o.Status.Pool.HostNames})
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
// Tenant of a pool holds a host name: its spec.tls or spec.pool changed,
// its deletion begun, its document placed on another pool, or the host
// names it holds changed; and its creation and deletion. The map function
// sees the object before and after, so both pools of a move hear of it.
var tenantHostNamesChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld.(*v1alpha1.Tenant), e.ObjectNew.(*v1alpha1.Tenant)
		return !equality.Semantic.DeepEqual(old.Spec.TLS, cur.Spec.TLS) || !equality.Semantic.DeepEqual(old.Spec.Pool, cur.Spec.Pool) ||
			old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero() ||
			placementOf(old) != placementOf(cur) || !slices.Equal(hostNamesOf(old), hostNamesOf(cur))
	},
}

// placementOf is the pool t's document is in, as namespace/name; "" when
// none.
func placementOf(t *v1alpha1.Tenant) string {
	if t.Status.Pool == nil {
		return ""
	}
	return t.Status.Pool.Namespace + "/" + t.Status.Pool.Name
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
