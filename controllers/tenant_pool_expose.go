package controllers

import (
	"context"
	"fmt"
	"maps"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1ac "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// A pooled Tenant's own spec.expose sends its workspace's path, on its own
// host names, to its pool's Service:
//
//   - a gateway expose is an HTTPRoute in the Tenant's namespace, as on a
//     bus of its own, so the Gateway's allowedRoutes decide on the
//     Tenant's namespace as they always do; when the pool is in another
//     namespace, a ReferenceGrant there, which the operator writes for the
//     pool (namespaces it admits only), lets that one route reach the
//     pool's Service;
//   - an ingress expose is an Ingress in the pool's namespace (an Ingress
//     cannot send to another namespace's Service), controlled by the pool.
//
// Both objects of the pool's namespace are named for the workspace
// (poolTenantObjectName: ids are unique on a pool) and labelled with the
// Tenant; the pool controller of the Tenant writes them once the
// workspace is placed, and deletes them when it leaves the pool.

// LabelTenantNamespace is the namespace of the Tenant an object in a
// pool's namespace was made for; LabelTenant is its name.
const LabelTenantNamespace = "bus.storybus.io/tenant-namespace"

// referenceGrantKind is the Gateway API kind that lets a route of one
// namespace reach a Service of another.
var referenceGrantKind = schema.GroupKind{Group: gatewayv1.GroupName, Kind: "ReferenceGrant"}

// referenceGrantsServed reports whether the cluster serves ReferenceGrant
// in gateway.networking.k8s.io/v1 (Gateway API v1.5 and later).
func referenceGrantsServed(m meta.RESTMapper) (bool, error) {
	return kindServed(m, referenceGrantKind, gatewayv1.GroupVersion.Version)
}

// poolTenantObjectName names the objects the operator makes in a pool's
// namespace for workspace ws placed on it.
func poolTenantObjectName(p *v1alpha1.BusPool, ws string) string {
	return poolObjectName(p) + "-ws-" + ws
}

// poolTenantLabels are the labels of the objects made in pool p's
// namespace for Tenant t.
func poolTenantLabels(p *v1alpha1.BusPool, t *v1alpha1.Tenant) map[string]string {
	l := maps.Clone(poolLabels(p))
	l[LabelTenant] = t.Name
	l[LabelTenantNamespace] = t.Namespace
	return l
}

// pooledRouteFront is the front of a pooled Tenant's HTTPRoute: named and
// owned like a bus of its own's, sending the workspace's path to the
// pool's Service.
func pooledRouteFront(t *v1alpha1.Tenant, p *v1alpha1.BusPool) busFront {
	f := tenantFront(t)
	f.backend = poolObjectName(p)
	if p.Namespace != t.Namespace {
		f.backendNamespace = p.Namespace
	}
	return f
}

// poolTenantFront is the front of a pooled Tenant's Ingress, in its
// pool's namespace and controlled by the pool.
func poolTenantFront(p *v1alpha1.BusPool, t *v1alpha1.Tenant) busFront {
	return busFront{
		name: poolTenantObjectName(p, t.EffectiveWorkspaceID()), namespace: p.Namespace,
		labels: poolTenantLabels(p, t), owner: poolOwnerRef(p),
		pathPrefix: v1alpha1.TenantPathPrefix(t.EffectiveWorkspaceID()),
		backend:    poolObjectName(p),
	}
}

// desiredPooledIngress is the Ingress of a pooled Tenant's own host name.
// The pool's key pair, when it has one, is the Ingress's TLS: its
// certificate must cover the Tenant's host too.
func desiredPooledIngress(p *v1alpha1.BusPool, t *v1alpha1.Tenant) *networkingv1ac.IngressApplyConfiguration {
	secret := ""
	if p.Spec.TLS != nil {
		secret = p.Spec.TLS.SecretName
	}
	return poolTenantFront(p, t).ingress(t.Spec.Expose.Ingress, secret)
}

// desiredReferenceGrant lets the HTTPRoutes of Tenant t's namespace reach
// pool p's publish Service, and nothing else of the pool's namespace.
func desiredReferenceGrant(p *v1alpha1.BusPool, t *v1alpha1.Tenant) *gatewayv1ac.ReferenceGrantApplyConfiguration {
	return gatewayv1ac.ReferenceGrant(poolTenantObjectName(p, t.EffectiveWorkspaceID()), p.Namespace).
		WithLabels(poolTenantLabels(p, t)).
		WithOwnerReferences(poolOwnerRef(p)).
		WithSpec(gatewayv1ac.ReferenceGrantSpec().
			WithFrom(gatewayv1ac.ReferenceGrantFrom().
				WithGroup(gatewayv1.GroupName).WithKind("HTTPRoute").WithNamespace(gatewayv1.Namespace(t.Namespace))).
			WithTo(gatewayv1ac.ReferenceGrantTo().
				WithGroup("").WithKind("Service").WithName(gatewayv1.ObjectName(poolObjectName(p)))))
}

// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=referencegrants,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch;create;patch;delete

// poolFrontWants reports which of its objects in pool p's namespace
// Tenant t's own spec.expose needs: its Ingress, or the ReferenceGrant its
// HTTPRoute needs from another namespace.
func poolFrontWants(p *v1alpha1.BusPool, t *v1alpha1.Tenant) (ingress, grant bool) {
	ex := t.Spec.Expose
	return ex != nil && ex.Ingress != nil, ex != nil && ex.Gateway != nil && t.Namespace != p.Namespace
}

// dropFront deletes, from the pool's namespace, what the Tenant's own
// spec.expose no longer needs there. It runs before the workspace is
// placed, so that it needs no answer of the pool's cluster.
func (r *TenantPoolReconciler) dropFront(ctx context.Context, s *poolScope) (reconcile.Result, error) {
	wantIngress, wantGrant := poolFrontWants(s.pool, s.tenant)
	if !wantIngress {
		if err := r.deletePoolObject(ctx, s.pool, s.tenant, &networkingv1.Ingress{}); err != nil {
			return reconcile.Result{}, err
		}
	}
	if r.referenceGrants && !wantGrant {
		return reconcile.Result{}, r.deletePoolObject(ctx, s.pool, s.tenant, &gatewayv1.ReferenceGrant{})
	}
	return reconcile.Result{}, nil
}

// front writes, in the pool's namespace, what the placed Tenant's own
// spec.expose needs there: its Ingress, or the ReferenceGrant its
// HTTPRoute needs.
func (r *TenantPoolReconciler) front(ctx context.Context, s *poolScope) (reconcile.Result, error) {
	t, p := s.tenant, s.pool
	wantIngress, wantGrant := poolFrontWants(p, t)
	if wantIngress {
		if err := r.writePoolObject(ctx, p, t, &networkingv1.Ingress{}, desiredPooledIngress(p, t)); err != nil {
			return reconcile.Result{}, err
		}
	}
	if r.referenceGrants && wantGrant {
		return reconcile.Result{}, r.writePoolObject(ctx, p, t, &gatewayv1.ReferenceGrant{}, desiredReferenceGrant(p, t))
	}
	return reconcile.Result{}, nil
}

// writePoolObject applies desired as Tenant t's object of obj's kind in
// pool p's namespace. One of that name the pool does not control, or made
// for another Tenant, stops the write: the operator never takes it over.
// The cache holds only what the operator labels, so a name it lacks is
// read from the API server before it is created.
func (r *TenantPoolReconciler) writePoolObject(ctx context.Context, p *v1alpha1.BusPool, t *v1alpha1.Tenant, obj client.Object, desired runtime.ApplyConfiguration) error {
	name := poolTenantObjectName(p, t.EffectiveWorkspaceID())
	what := fmt.Sprintf("%T %s/%s", obj, p.Namespace, name)
	key := types.NamespacedName{Namespace: p.Namespace, Name: name}
	err := r.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, obj)
	}
	var cur client.Object
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("get %s: %w", what, err)
	case !madeFor(obj, p, t):
		return reconcile.TerminalError(fmt.Errorf("%s exists and was not made by BusPool %s for Tenant %s/%s", what, p.Name, t.Namespace, t.Name))
	default:
		cur = obj
	}
	w := objectWriter{Client: r.Client, APIReader: r.APIReader}
	_, err = w.apply(ctx, cur, desired, what)
	return err
}

// deletePoolObject deletes Tenant t's object of obj's kind in pool p's
// namespace, if the cache holds one (every object the operator makes is
// labelled so): one of that name made for another Tenant, or by someone
// else, is left alone.
func (r *TenantPoolReconciler) deletePoolObject(ctx context.Context, p *v1alpha1.BusPool, t *v1alpha1.Tenant, obj client.Object) error {
	name := poolTenantObjectName(p, t.EffectiveWorkspaceID())
	switch err := r.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name}, obj); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get %T %s/%s: %w", obj, p.Namespace, name, err)
	case !madeFor(obj, p, t):
		return nil
	}
	if err := r.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %T %s/%s: %w", obj, p.Namespace, name, err)
	}
	return nil
}

// madeFor reports whether obj, in pool p's namespace, is p's and was made
// for Tenant t.
func madeFor(obj client.Object, p *v1alpha1.BusPool, t *v1alpha1.Tenant) bool {
	l := obj.GetLabels()
	return controlledBy(obj, p) && l[LabelTenant] == t.Name && l[LabelTenantNamespace] == t.Namespace
}

// deleteFront deletes what Tenant t had in pool p's namespace for its own
// spec.expose: it leaves the pool, is deleted, or no longer holds its
// workspace there.
func (r *TenantPoolReconciler) deleteFront(ctx context.Context, p *v1alpha1.BusPool, t *v1alpha1.Tenant) error {
	if err := r.deletePoolObject(ctx, p, t, &networkingv1.Ingress{}); err != nil {
		return err
	}
	if !r.referenceGrants {
		return nil
	}
	return r.deletePoolObject(ctx, p, t, &gatewayv1.ReferenceGrant{})
}

// tenantOfPoolObject maps an object the operator made in a pool's
// namespace for a Tenant to that Tenant.
func tenantOfPoolObject(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[LabelTenantNamespace] == "" || l[LabelTenant] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[LabelTenantNamespace], Name: l[LabelTenant]}}}
}

// reconcilePooledExpose writes a pooled Tenant's HTTPRoute, sending its
// workspace's path to pool p's Service once the workspace is placed
// there, or deletes the one it controls when it has no gateway expose or
// is not placed, and observes the route, or the Ingress its pool
// controller writes in the pool's namespace. p is nil when the pool is
// not there: PoolReady says so, and Exposed is left as it was.
func (r *TenantWorkloadReconciler) reconcilePooledExpose(ctx context.Context, t *v1alpha1.Tenant, p *v1alpha1.BusPool) (*exposeObservation, error) {
	ex := t.Spec.Expose
	// Only a Tenant placed on p holds its workspace's path there: one the
	// pool does not admit, or that another Tenant's holds the workspace
	// id against, routes nothing.
	placed := p != nil && placedOn(t, client.ObjectKeyFromObject(p))
	if r.gatewayAPI && (ex == nil || ex.Gateway == nil || !placed) {
		if err := r.deleteControlled(ctx, t, &gatewayv1.HTTPRoute{}); err != nil {
			return nil, err
		}
	}
	if ex == nil || p == nil {
		return nil, nil
	}
	if ex.Ingress != nil {
		o := &exposeObservation{ingressName: poolTenantObjectName(p, t.EffectiveWorkspaceID())}
		ing := &networkingv1.Ingress{}
		switch err := r.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: o.ingressName}, ing); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("get ingress %s/%s: %w", p.Namespace, o.ingressName, err)
		case madeFor(ing, p, t):
			o.ingress = ing
		}
		return o, nil
	}
	ws := &workloadScope{tenant: t}
	err := r.reconcileHTTPRoute(ctx, ws, pooledRouteFront(t, p), placed)
	// A name conflict stops nothing else on a pool: Exposed says it.
	ws.expose.conflict = ws.conflict
	return ws.expose, err
}
