package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TestPooledTenantExposesItsOwnHost: a pooled Tenant's own spec.expose
// sends its workspace's path, on its own host name, to its pool's
// Service. A gateway expose is an HTTPRoute in the Tenant's namespace
// (the Gateway's allowedRoutes decide on it, as on a bus of its own) with
// a ReferenceGrant of the pool's letting it reach the pool's Service in
// the pool's namespace; an ingress expose is an Ingress in the pool's
// namespace. Each goes when the expose changes, and when the Tenant does.
// A pooled Tenant's issuerRef with no name to certify is refused.
func TestPooledTenantExposesItsOwnHost(t *testing.T) {
	nats, _ := startPoolCluster(t)
	poolNS, ns := newNamespace(t), newNamespace(t)
	ctx := context.Background()
	create(t, newBusPool(poolNS, "shared", nats.ClientURL(), func(p *v1alpha1.BusPool) {
		p.Spec.AllowedTenants = &v1alpha1.AllowedTenants{Namespaces: &v1alpha1.TenantNamespaces{From: v1alpha1.NamespacesFromAll}}
		p.Spec.TLS = &v1alpha1.BusPoolTLS{SecretName: "pool-tls"}
	}))
	onPool := func(tn *v1alpha1.Tenant) {
		tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared", Namespace: poolNS}
	}

	err := k8s.Create(ctx, newTenant(ns, "keyed", onPool, func(tn *v1alpha1.Tenant) {
		tn.Spec.TLS = &v1alpha1.TenantTLS{IssuerRef: &v1alpha1.IssuerReference{Name: "brands"}}
	}))
	if err == nil || !strings.Contains(err.Error(), "a pooled Tenant has no Service of its own") {
		t.Errorf("a pooled Tenant with an issuerRef and no name to certify: %v, want refused by the API server", err)
	}

	create(t, newTenant(ns, "brand", onPool, func(tn *v1alpha1.Tenant) {
		tn.Spec.Expose = &v1alpha1.TenantExpose{Gateway: &v1alpha1.GatewayExpose{Hostnames: []string{"brand.example.com"}}}
	}))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced)

	// The route, in the Tenant's namespace, to the pool's Service.
	eventually(t, "the pooled Tenant's HTTPRoute", func() error {
		route := &gatewayv1.HTTPRoute{}
		if err := get(ns, "brand-bus", route); err != nil {
			return err
		}
		if len(route.Spec.Hostnames) != 1 || route.Spec.Hostnames[0] != "brand.example.com" || len(route.Spec.Rules) != 1 {
			return fmt.Errorf("spec %+v", route.Spec)
		}
		r := route.Spec.Rules[0]
		if len(r.Matches) != 1 || r.Matches[0].Path == nil || *r.Matches[0].Path.Value != "/v1/tenants/brand/" {
			return fmt.Errorf("matches %+v", r.Matches)
		}
		if len(r.BackendRefs) != 1 {
			return fmt.Errorf("backends %+v", r.BackendRefs)
		}
		b := r.BackendRefs[0].BackendObjectReference
		if b.Name != "shared-pool" || b.Namespace == nil || string(*b.Namespace) != poolNS || b.Port == nil || *b.Port != HTTPPort {
			return fmt.Errorf("backend %s/%s:%v, want %s/shared-pool:%d", deref(b.Namespace), b.Name, b.Port, poolNS, HTTPPort)
		}
		return nil
	})
	// The pool's grant, for that namespace's routes and the pool's Service.
	eventually(t, "the pool's ReferenceGrant", func() error {
		g := &gatewayv1.ReferenceGrant{}
		if err := get(poolNS, "shared-pool-ws-brand", g); err != nil {
			return err
		}
		if len(g.Spec.From) != 1 || g.Spec.From[0].Kind != "HTTPRoute" || string(g.Spec.From[0].Namespace) != ns {
			return fmt.Errorf("from %+v", g.Spec.From)
		}
		if len(g.Spec.To) != 1 || g.Spec.To[0].Kind != "Service" || g.Spec.To[0].Name == nil || *g.Spec.To[0].Name != "shared-pool" {
			return fmt.Errorf("to %+v", g.Spec.To)
		}
		if ref := metav1.GetControllerOf(g); ref == nil || ref.Kind != "BusPool" || ref.Name != "shared" {
			return fmt.Errorf("controller %+v", ref)
		}
		return nil
	})
	waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonRoutePending)
	if want := "https://brand.example.com/v1/tenants/brand"; tn.Status.ExternalEndpoint != want {
		t.Errorf("externalEndpoint %q, want %q", tn.Status.ExternalEndpoint, want)
	}

	// Another Tenant claiming the same workspace id on the pool routes
	// nothing: no route of its own, and the holder's grant stays.
	create(t, newTenant(ns, "rival", onPool, func(tn *v1alpha1.Tenant) {
		tn.Spec.WorkspaceID = "brand"
		tn.Spec.Expose = &v1alpha1.TenantExpose{Gateway: &v1alpha1.GatewayExpose{Hostnames: []string{"rival.example.com"}}}
	}))
	waitCondition(t, ns, "rival", &v1alpha1.Tenant{}, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionFalse, v1alpha1.ReasonWorkspaceConflict)
	consistently(t, "the rival routes nothing, the holder's grant stays", 2*time.Second, func() error {
		if err := gone(ns, "rival-bus", &gatewayv1.HTTPRoute{}); err != nil {
			return err
		}
		return get(poolNS, "shared-pool-ws-brand", &gatewayv1.ReferenceGrant{})
	})
	if err := k8s.Delete(ctx, newTenant(ns, "rival")); err != nil {
		t.Fatal(err)
	}

	// A route of the pooled Tenant's name that someone else made is not
	// taken over: Exposed says so, and the pool serves the workspace all
	// the same.
	squat := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "squat-bus"},
		Spec: gatewayv1.HTTPRouteSpec{Hostnames: []gatewayv1.Hostname{"someone.example.com"}}}
	create(t, squat)
	create(t, newTenant(ns, "squat", onPool, func(tn *v1alpha1.Tenant) {
		tn.Spec.Expose = &v1alpha1.TenantExpose{Gateway: &v1alpha1.GatewayExpose{Hostnames: []string{"squat.example.com"}}}
	}))
	sq := &v1alpha1.Tenant{}
	waitCondition(t, ns, "squat", sq, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonNameConflict)
	if c := findCondition(sq.Status.Conditions, v1alpha1.ConditionExposed); !strings.Contains(c.Message, "squat-bus") {
		t.Errorf("Exposed %q: want the HTTPRoute named", c.Message)
	}
	waitCondition(t, ns, "squat", sq, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced)
	mustGet(t, ns, "squat-bus", squat)
	if len(squat.Spec.Hostnames) != 1 || squat.Spec.Hostnames[0] != "someone.example.com" || metav1.GetControllerOf(squat) != nil {
		t.Errorf("the squatted route was changed: %+v, controller %+v", squat.Spec, metav1.GetControllerOf(squat))
	}
	if err := k8s.Delete(ctx, newTenant(ns, "squat")); err != nil {
		t.Fatal(err)
	}

	// The pool stops admitting the Tenant's namespace: its grant goes, so
	// its route no longer reaches the pool.
	update(t, poolNS, "shared", &v1alpha1.BusPool{}, func(p *v1alpha1.BusPool) {
		p.Spec.AllowedTenants = &v1alpha1.AllowedTenants{Namespaces: &v1alpha1.TenantNamespaces{From: v1alpha1.NamespacesFromSame}}
	})
	eventually(t, "the grant gone once the namespace is not admitted", func() error {
		return gone(poolNS, "shared-pool-ws-brand", &gatewayv1.ReferenceGrant{})
	})
	update(t, poolNS, "shared", &v1alpha1.BusPool{}, func(p *v1alpha1.BusPool) {
		p.Spec.AllowedTenants = &v1alpha1.AllowedTenants{Namespaces: &v1alpha1.TenantNamespaces{From: v1alpha1.NamespacesFromAll}}
	})
	mustGet(t, poolNS, "shared-pool-ws-brand", &gatewayv1.ReferenceGrant{})

	// An ingress instead: in the pool's namespace, the pool's key pair its
	// TLS; the route and the grant go.
	update(t, ns, "brand", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) {
		tn.Spec.Expose = &v1alpha1.TenantExpose{Ingress: &v1alpha1.IngressExpose{Host: "news.example.com"}}
	})
	eventually(t, "the pooled Tenant's Ingress", func() error {
		ing := &networkingv1.Ingress{}
		if err := get(poolNS, "shared-pool-ws-brand", ing); err != nil {
			return err
		}
		if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != "news.example.com" || ing.Spec.Rules[0].HTTP == nil || len(ing.Spec.Rules[0].HTTP.Paths) != 1 {
			return fmt.Errorf("rules %+v", ing.Spec.Rules)
		}
		p := ing.Spec.Rules[0].HTTP.Paths[0]
		if p.Path != "/v1/tenants/brand/" || p.Backend.Service == nil || p.Backend.Service.Name != "shared-pool" {
			return fmt.Errorf("path %+v", p)
		}
		if len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "pool-tls" {
			return fmt.Errorf("tls %+v", ing.Spec.TLS)
		}
		return nil
	})
	eventually(t, "the route and the grant gone", func() error {
		if err := gone(ns, "brand-bus", &gatewayv1.HTTPRoute{}); err != nil {
			return err
		}
		return gone(poolNS, "shared-pool-ws-brand", &gatewayv1.ReferenceGrant{})
	})
	waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonIngressPending)
	if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionExposed); !strings.Contains(c.Message, "shared-pool-ws-brand") {
		t.Errorf("Exposed %q: want the Ingress named", c.Message)
	}
	eventually(t, "ingress address", func() error {
		ing := &networkingv1.Ingress{}
		if err := get(poolNS, "shared-pool-ws-brand", ing); err != nil {
			return err
		}
		ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.9"}}
		return k8s.Status().Update(ctx, ing)
	})
	waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionTrue, v1alpha1.ReasonIngressAdmitted)
	if want := "https://news.example.com/v1/tenants/brand"; tn.Status.ExternalEndpoint != want {
		t.Errorf("externalEndpoint %q, want %q", tn.Status.ExternalEndpoint, want)
	}

	// No expose: the Ingress goes, and the pool is not exposed either.
	update(t, ns, "brand", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.Expose = nil })
	eventually(t, "the Ingress gone", func() error { return gone(poolNS, "shared-pool-ws-brand", &networkingv1.Ingress{}) })
	eventually(t, "Exposed and externalEndpoint gone", func() error {
		if err := get(ns, "brand", tn); err != nil {
			return err
		}
		if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionExposed); c != nil || tn.Status.ExternalEndpoint != "" {
			return fmt.Errorf("Exposed %+v, externalEndpoint %q", c, tn.Status.ExternalEndpoint)
		}
		return nil
	})

	// Exposed again, then deleted: what it had in the pool's namespace goes.
	update(t, ns, "brand", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) {
		tn.Spec.Expose = &v1alpha1.TenantExpose{Ingress: &v1alpha1.IngressExpose{Host: "news.example.com"}}
	})
	mustGet(t, poolNS, "shared-pool-ws-brand", &networkingv1.Ingress{})
	if err := k8s.Delete(ctx, newTenant(ns, "brand")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted Tenant's Ingress gone", func() error {
		if err := gone(ns, "brand", &v1alpha1.Tenant{}); err != nil {
			return err
		}
		return gone(poolNS, "shared-pool-ws-brand", &networkingv1.Ingress{})
	})
}

// deref is *p, or "" for nil.
func deref[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

// TestPooledTenantDropsItsIngressWithoutItsCluster: removing a pooled
// Tenant's spec.expose takes its Ingress out of the pool's namespace even
// while the pool's NATS cluster does not answer, which placing the
// workspace needs and removing its route does not.
func TestPooledTenantDropsItsIngressWithoutItsCluster(t *testing.T) {
	nats, _ := startPoolCluster(t)
	ns := newNamespace(t)
	create(t, newBusPool(ns, "shared", nats.ClientURL()))
	create(t, newTenant(ns, "brand", func(tn *v1alpha1.Tenant) {
		tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared"}
		tn.Spec.Expose = &v1alpha1.TenantExpose{Ingress: &v1alpha1.IngressExpose{Host: "news.example.com"}}
	}))
	mustGet(t, ns, "shared-pool-ws-brand", &networkingv1.Ingress{})
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced)
	placed := tn.Status.ConfigHash

	// The cluster goes, and a new configuration cannot be placed.
	nats.Shutdown()
	nats.WaitForShutdown()
	update(t, ns, "brand", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.Sandbox = true })
	eventually(t, "a configuration the pool cannot be given", func() error {
		if err := get(ns, "brand", tn); err != nil {
			return err
		}
		if tn.Status.ConfigHash == placed {
			return fmt.Errorf("configuration %s, the one placed", tn.Status.ConfigHash)
		}
		return nil
	})
	update(t, ns, "brand", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.Expose = nil })
	eventually(t, "the Ingress gone with the cluster down", func() error {
		return gone(ns, "shared-pool-ws-brand", &networkingv1.Ingress{})
	})

	// The pool goes, then the Tenant: with no pool, nothing waits on its
	// cluster.
	if err := k8s.Delete(context.Background(), newBusPool(ns, "shared", "")); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(context.Background(), newTenant(ns, "brand")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Tenant gone", func() error { return gone(ns, "brand", &v1alpha1.Tenant{}) })
}
