package controllers

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// ExposeOptions are the operator's defaults for the Tenants' spec.expose.
type ExposeOptions struct {
	// Gateway is the Gateway of gateway exposes that name no parentRefs;
	// nil leaves such a Tenant unexposed (condition Exposed False,
	// NoGateway).
	Gateway *v1alpha1.GatewayParentRef
}

// httpRouteKind is the Gateway API kind the operator writes.
var httpRouteKind = schema.GroupKind{Group: gatewayv1.GroupName, Kind: "HTTPRoute"}

// gatewayAPIInstalled reports whether the cluster serves HTTPRoute in
// gateway.networking.k8s.io/v1: its CRDs are optional.
func gatewayAPIInstalled(m meta.RESTMapper) (bool, error) {
	return kindServed(m, httpRouteKind, gatewayv1.GroupVersion.Version)
}

// kindServed reports whether the cluster serves kind gk in version.
func kindServed(m meta.RESTMapper, gk schema.GroupKind, version string) (bool, error) {
	_, err := m.RESTMapping(gk, version)
	switch {
	case meta.IsNoMatchError(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up %s: %w", gk, err)
	}
	return true, nil
}

// exposeObservation is what the expose phase saw of the Tenant's route.
type exposeObservation struct {
	// gatewayAPIMissing: a gateway expose on a cluster without HTTPRoute.
	gatewayAPIMissing bool
	// parents are the Gateways the route attaches to; none with a gateway
	// expose means no Gateway was named and no default is configured.
	parents []v1alpha1.GatewayParentRef
	// route and ingress are the objects as read back (nil before the
	// cache has them).
	route   *gatewayv1.HTTPRoute
	ingress *networkingv1.Ingress
	// ingressName names the Ingress when it is not named like the bus: a
	// pooled Tenant's is in its pool's namespace.
	ingressName string
	// conflict is a route name taken by an object the Tenant does not
	// control: a pooled Tenant reports it in Exposed, since its bus, the
	// pool, serves it all the same.
	conflict error
}

// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch;create;patch;delete

// reconcileExpose writes the HTTPRoute or Ingress spec.expose asks for and
// deletes the one of the other kind (or both, without spec.expose) that the
// Tenant controls. Both are named like the bus.
func (r *TenantWorkloadReconciler) reconcileExpose(ctx context.Context, s *workloadScope) (ctrl.Result, error) {
	t := s.tenant
	ex := t.Spec.Expose
	wantRoute := ex != nil && ex.Gateway != nil
	wantIngress := ex != nil && ex.Ingress != nil
	if r.gatewayAPI && !wantRoute {
		if err := r.deleteControlled(ctx, t, &gatewayv1.HTTPRoute{}); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !wantIngress {
		if err := r.deleteControlled(ctx, t, &networkingv1.Ingress{}); err != nil {
			return ctrl.Result{}, err
		}
	}
	switch {
	case wantRoute:
		return ctrl.Result{}, r.reconcileHTTPRoute(ctx, s, tenantFront(s.tenant), true)
	case wantIngress:
		return ctrl.Result{}, r.reconcileIngress(ctx, s)
	}
	return ctrl.Result{}, nil
}

// reconcileHTTPRoute writes the Tenant's HTTPRoute of front, when write
// is true, and observes it in s.expose: a bus of its own's sends to its
// Service, a pooled Tenant's to its pool's.
func (r *TenantWorkloadReconciler) reconcileHTTPRoute(ctx context.Context, s *workloadScope, front busFront, write bool) error {
	t := s.tenant
	s.expose = &exposeObservation{}
	if !r.gatewayAPI {
		s.expose.gatewayAPIMissing = true
		return nil
	}
	parents := t.Spec.Expose.Gateway.ParentRefs
	if len(parents) == 0 && r.Expose.Gateway != nil {
		parents = []v1alpha1.GatewayParentRef{*r.Expose.Gateway}
	}
	s.expose.parents = parents
	if !write {
		return nil
	}
	route := &gatewayv1.HTTPRoute{}
	cur, err := r.owned(ctx, s, "HTTPRoute", busName(t), route)
	if err != nil || len(parents) == 0 {
		return err
	}
	// Only the workspace's path prefix, and nothing else, goes to the
	// Service: Tenants sharing a Gateway and host name each own their
	// prefix.
	if _, err := r.apply(ctx, cur, front.httpRoute(parents, t.Spec.Expose.Gateway.Hostnames), "httproute"); err != nil {
		return err
	}
	if cur != nil {
		s.expose.route = route
	}
	return nil
}

func (r *TenantWorkloadReconciler) reconcileIngress(ctx context.Context, s *workloadScope) error {
	t := s.tenant
	s.expose = &exposeObservation{}
	ing := &networkingv1.Ingress{}
	cur, err := r.write(ctx, s, "Ingress", busName(t), ing, desiredIngress(t))
	if err != nil {
		return err
	}
	if cur != nil {
		s.expose.ingress = ing
	}
	return nil
}

// deleteControlled deletes the object of obj's kind named like the bus when
// the Tenant controls it; one it does not control is left alone.
func (r *TenantWorkloadReconciler) deleteControlled(ctx context.Context, t *v1alpha1.Tenant, obj client.Object) error {
	return deleteIfControlled(ctx, r.Client, t, busName(t), obj)
}

// desiredIngress is the Ingress of the workspace's path prefix on the
// Tenant's host name. The ingress controller terminates TLS with the
// Tenant's own key pair, whose Certificate covers the host
// (certificateDNSNames).
func desiredIngress(t *v1alpha1.Tenant) *networkingv1ac.IngressApplyConfiguration {
	return tenantFront(t).ingress(t.Spec.Expose.Ingress, tlsSecretName(t))
}

// externalEndpoint is the base URL producers outside the cluster use: the
// Ingress's host, or the route's first host name that is not a wildcard.
// The Gateway listener or ingress controller terminates TLS.
func externalEndpoint(t *v1alpha1.Tenant) string {
	ex := t.Spec.Expose
	switch {
	case ex == nil:
	case ex.Ingress != nil:
		return "https://" + ex.Ingress.Host
	case ex.Gateway != nil:
		for _, h := range ex.Gateway.Hostnames {
			if !strings.HasPrefix(h, "*") {
				return "https://" + h
			}
		}
	}
	return ""
}

// exposedCondition is the Exposed condition o decides for t.
func exposedCondition(t *v1alpha1.Tenant, o *exposeObservation) metav1.Condition {
	prefix := v1alpha1.TenantPathPrefix(t.EffectiveWorkspaceID())
	if o.conflict != nil {
		return nameConflictCondition(v1alpha1.ConditionExposed, o.conflict)
	}
	if t.Spec.Expose.Ingress != nil {
		if o.ingress != nil {
			for _, lb := range o.ingress.Status.LoadBalancer.Ingress {
				if addr := cmp.Or(lb.IP, lb.Hostname); addr != "" {
					return cond(v1alpha1.ConditionExposed, metav1.ConditionTrue, v1alpha1.ReasonIngressAdmitted,
						"Ingress %s serves %s%s at load balancer %s", o.ingress.Name, t.Spec.Expose.Ingress.Host, prefix, addr)
				}
			}
		}
		return cond(v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonIngressPending,
			"Ingress %s has no load-balancer address yet: is an ingress controller serving its class?", cmp.Or(o.ingressName, busName(t)))
	}
	switch {
	case o.gatewayAPIMissing:
		return cond(v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonGatewayAPINotInstalled,
			"the cluster has no Gateway API HTTPRoute kind (%s/%s): install the Gateway API CRDs, then restart the operator", gatewayv1.GroupName, gatewayv1.GroupVersion.Version)
	case len(o.parents) == 0:
		return cond(v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonNoGateway,
			"spec.expose.gateway names no parentRefs and the operator has no default Gateway (--expose-gateway)")
	}
	var pending, refused []string
	for _, p := range o.parents {
		name := gatewayName(t, p)
		st := routeParentStatus(t, o.route, p)
		if st == nil {
			pending = append(pending, name)
			continue
		}
		ok := true
		for _, ct := range []gatewayv1.RouteConditionType{gatewayv1.RouteConditionAccepted, gatewayv1.RouteConditionResolvedRefs} {
			c := meta.FindStatusCondition(st.Conditions, string(ct))
			switch {
			case c == nil || c.Status == metav1.ConditionUnknown:
				if ok {
					pending = append(pending, name)
				}
				ok = false
			case c.Status == metav1.ConditionFalse:
				refused = append(refused, fmt.Sprintf("%s: %s %s (%s) %s", name, ct, c.Status, c.Reason, c.Message))
				ok = false
			}
		}
	}
	switch {
	case len(refused) > 0:
		return cond(v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonRouteNotAccepted,
			"HTTPRoute %s: %s", busName(t), strings.Join(refused, "; "))
	case len(pending) > 0:
		return cond(v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonRoutePending,
			"HTTPRoute %s awaits the controller of Gateway %s", busName(t), strings.Join(pending, ", "))
	}
	return cond(v1alpha1.ConditionExposed, metav1.ConditionTrue, v1alpha1.ReasonRouteAccepted,
		"HTTPRoute %s sends %s to the bus; accepted by %d Gateway(s)", busName(t), prefix, len(o.parents))
}

// gatewayName is namespace/name of a parent Gateway.
func gatewayName(t *v1alpha1.Tenant, p v1alpha1.GatewayParentRef) string {
	n := cmp.Or(p.Namespace, t.Namespace) + "/" + p.Name
	if p.SectionName != "" {
		n += " (listener " + p.SectionName + ")"
	}
	return n
}

// routeParentStatus is the status the route carries for parent p; nil when
// it carries none yet.
func routeParentStatus(t *v1alpha1.Tenant, route *gatewayv1.HTTPRoute, p v1alpha1.GatewayParentRef) *gatewayv1.RouteParentStatus {
	if route == nil {
		return nil
	}
	for i := range route.Status.Parents {
		ref := route.Status.Parents[i].ParentRef
		ns := t.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		section := ""
		if ref.SectionName != nil {
			section = string(*ref.SectionName)
		}
		if string(ref.Name) == p.Name && ns == cmp.Or(p.Namespace, t.Namespace) && section == p.SectionName {
			return &route.Status.Parents[i]
		}
	}
	return nil
}

// applyExposeStatus writes status.externalEndpoint and the Exposed
// condition; without spec.expose both are removed. A reconcile that did not
// reach the expose phase (o nil) leaves the condition as it was.
func applyExposeStatus(t *v1alpha1.Tenant, o *exposeObservation) {
	if t.Spec.Expose == nil {
		t.Status.ExternalEndpoint = ""
		meta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionExposed)
		return
	}
	if o == nil {
		return
	}
	t.Status.ExternalEndpoint = externalEndpoint(t)
	setCondition(t, exposedCondition(t, o))
}
