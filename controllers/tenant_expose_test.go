package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// The HTTPRoutes here are written to the real Gateway API CRDs (standard
// channel, from the module go.mod pins), so their schema and CEL rules
// judge them. No Gateway controller runs: the tests write the route status
// one would.

var sharedGateway = []v1alpha1.GatewayParentRef{{Namespace: "gateway-system", Name: "shared"}}

// exposeGateway sets spec.expose.gateway.
func exposeGateway(parents []v1alpha1.GatewayParentRef, hostnames ...string) func(*v1alpha1.Tenant) {
	return func(t *v1alpha1.Tenant) {
		t.Spec.Expose = &v1alpha1.TenantExpose{Gateway: &v1alpha1.GatewayExpose{ParentRefs: parents, Hostnames: hostnames}}
	}
}

// routeRule checks that route sends exactly prefix to the bus of tenant.
func routeRule(route *gatewayv1.HTTPRoute, tenant, prefix string) error {
	if len(route.Spec.Rules) != 1 {
		return fmt.Errorf("%d rules, want 1", len(route.Spec.Rules))
	}
	r := route.Spec.Rules[0]
	if len(r.Matches) != 1 || r.Matches[0].Path == nil || r.Matches[0].Path.Type == nil ||
		*r.Matches[0].Path.Type != gatewayv1.PathMatchPathPrefix || r.Matches[0].Path.Value == nil || *r.Matches[0].Path.Value != prefix {
		return fmt.Errorf("matches %+v, want only the path prefix %s", r.Matches, prefix)
	}
	if len(r.BackendRefs) != 1 || string(r.BackendRefs[0].Name) != tenant+"-bus" || r.BackendRefs[0].Port == nil || *r.BackendRefs[0].Port != HTTPPort ||
		r.BackendRefs[0].Kind == nil || *r.BackendRefs[0].Kind != "Service" {
		return fmt.Errorf("backends %+v, want Service %s-bus port %d", r.BackendRefs, tenant, HTTPPort)
	}
	return nil
}

// setRouteParents writes the route status the controller of the shared
// Gateway would.
func setRouteParents(t *testing.T, ns, name string, accepted metav1.ConditionStatus, reason string) {
	t.Helper()
	gwNS := gatewayv1.Namespace("gateway-system")
	eventually(t, "route status", func() error {
		r := &gatewayv1.HTTPRoute{}
		if err := get(ns, name, r); err != nil {
			return err
		}
		now := metav1.Now()
		r.Status.Parents = []gatewayv1.RouteParentStatus{{
			ParentRef:      gatewayv1.ParentReference{Namespace: &gwNS, Name: "shared"},
			ControllerName: "example.com/gateway-controller",
			Conditions: []metav1.Condition{
				{Type: string(gatewayv1.RouteConditionAccepted), Status: accepted, Reason: reason, Message: "from the test", LastTransitionTime: now, ObservedGeneration: r.Generation},
				{Type: string(gatewayv1.RouteConditionResolvedRefs), Status: metav1.ConditionTrue, Reason: "ResolvedRefs", Message: "from the test", LastTransitionTime: now, ObservedGeneration: r.Generation},
			},
		}}
		return k8s.Status().Update(context.Background(), r)
	})
}

func TestTenantExposeGateway(t *testing.T) {
	ns := newNamespace(t)
	// Two workspaces on one Gateway and host name, one id a string prefix
	// of the other: their path prefixes must still not overlap.
	news := newTenant(ns, "news", exposeGateway(sharedGateway, "bus.example.com"))
	wire := newTenant(ns, "wire", exposeGateway(sharedGateway, "bus.example.com"), func(t *v1alpha1.Tenant) { t.Spec.WorkspaceID = "news-wire" })
	create(t, news)
	create(t, wire)

	prefixes := map[string]string{"news": "/v1/tenants/news/", "wire": "/v1/tenants/news-wire/"}
	for name, prefix := range prefixes {
		owner := &v1alpha1.Tenant{}
		mustGet(t, ns, name, owner)
		eventually(t, "HTTPRoute of "+name, func() error {
			r := &gatewayv1.HTTPRoute{}
			if err := get(ns, name+"-bus", r); err != nil {
				return err
			}
			if err := isController(r, owner); err != nil {
				return err
			}
			if len(r.Spec.ParentRefs) != 1 || string(r.Spec.ParentRefs[0].Name) != "shared" || r.Spec.ParentRefs[0].Namespace == nil || *r.Spec.ParentRefs[0].Namespace != "gateway-system" {
				return fmt.Errorf("parentRefs %+v", r.Spec.ParentRefs)
			}
			if len(r.Spec.Hostnames) != 1 || r.Spec.Hostnames[0] != "bus.example.com" {
				return fmt.Errorf("hostnames %v", r.Spec.Hostnames)
			}
			return routeRule(r, name, prefix)
		})
	}
	// Gateway API's PathPrefix matches whole path elements; the trailing
	// slash makes the prefixes disjoint even as plain strings.
	if strings.HasPrefix(prefixes["wire"], prefixes["news"]) || strings.HasPrefix(prefixes["news"], prefixes["wire"]) {
		t.Fatalf("prefixes %v overlap", prefixes)
	}

	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonRoutePending)
	if tn.Status.ExternalEndpoint != "https://bus.example.com" {
		t.Errorf("externalEndpoint %q", tn.Status.ExternalEndpoint)
	}
	if !strings.HasPrefix(tn.Status.Endpoint, "http://news-bus.") {
		t.Errorf("endpoint %q: the in-cluster URL must stay", tn.Status.Endpoint)
	}
	setRouteParents(t, ns, "news-bus", metav1.ConditionTrue, "Accepted")
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionTrue, v1alpha1.ReasonRouteAccepted)
	setRouteParents(t, ns, "news-bus", metav1.ConditionFalse, "NotAllowedByListeners")
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonRouteNotAccepted)
	if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionExposed); !strings.Contains(c.Message, "NotAllowedByListeners") {
		t.Errorf("message %q does not carry the Gateway's reason", c.Message)
	}

	// Editing spec.expose updates the route.
	update(t, ns, "news", &v1alpha1.Tenant{}, func(t *v1alpha1.Tenant) {
		t.Spec.Expose.Gateway.ParentRefs[0].SectionName = "https"
		t.Spec.Expose.Gateway.Hostnames = []string{"news.example.com"}
	})
	eventually(t, "route follows the edit", func() error {
		r := &gatewayv1.HTTPRoute{}
		if err := get(ns, "news-bus", r); err != nil {
			return err
		}
		if len(r.Spec.Hostnames) != 1 || r.Spec.Hostnames[0] != "news.example.com" ||
			r.Spec.ParentRefs[0].SectionName == nil || *r.Spec.ParentRefs[0].SectionName != "https" {
			return fmt.Errorf("hostnames %v parentRefs %+v", r.Spec.Hostnames, r.Spec.ParentRefs)
		}
		return nil
	})
	// The status names the old listener-less parent: the new one has not
	// reported yet.
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonRoutePending)
	if tn.Status.ExternalEndpoint != "https://news.example.com" {
		t.Errorf("externalEndpoint %q", tn.Status.ExternalEndpoint)
	}

	// Switching to an Ingress removes the route.
	update(t, ns, "news", &v1alpha1.Tenant{}, func(t *v1alpha1.Tenant) {
		t.Spec.Expose = &v1alpha1.TenantExpose{Ingress: &v1alpha1.IngressExpose{Host: "news.example.com"}}
	})
	eventually(t, "route removed", func() error { return gone(ns, "news-bus", &gatewayv1.HTTPRoute{}) })
	eventually(t, "ingress made", func() error { return get(ns, "news-bus", &networkingv1.Ingress{}) })
	// The other Tenant's route is its own.
	mustGet(t, ns, "wire-bus", &gatewayv1.HTTPRoute{})

	// Removing spec.expose removes the Ingress, the condition and the URL.
	update(t, ns, "news", &v1alpha1.Tenant{}, func(t *v1alpha1.Tenant) { t.Spec.Expose = nil })
	eventually(t, "ingress removed", func() error { return gone(ns, "news-bus", &networkingv1.Ingress{}) })
	eventually(t, "condition removed", func() error {
		if err := get(ns, "news", tn); err != nil {
			return err
		}
		if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionExposed); c != nil || tn.Status.ExternalEndpoint != "" {
			return fmt.Errorf("condition %+v, externalEndpoint %q", c, tn.Status.ExternalEndpoint)
		}
		return nil
	})
}

func TestTenantExposeDefaultGateway(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "plain", exposeGateway(nil)))
	eventually(t, "route on the operator's Gateway", func() error {
		r := &gatewayv1.HTTPRoute{}
		if err := get(ns, "plain-bus", r); err != nil {
			return err
		}
		p := r.Spec.ParentRefs
		if len(p) != 1 || string(p[0].Name) != testDefaultGateway.Name || p[0].Namespace == nil || string(*p[0].Namespace) != testDefaultGateway.Namespace {
			return fmt.Errorf("parentRefs %+v, want %+v", p, testDefaultGateway)
		}
		if len(r.Spec.Hostnames) != 0 {
			return fmt.Errorf("hostnames %v, want none", r.Spec.Hostnames)
		}
		return routeRule(r, "plain", "/v1/tenants/plain/")
	})
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "plain", tn, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonRoutePending)
	if tn.Status.ExternalEndpoint != "" {
		t.Errorf("externalEndpoint %q without hostnames", tn.Status.ExternalEndpoint)
	}
}

func TestTenantExposeIngress(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "desk", func(t *v1alpha1.Tenant) {
		t.Spec.Expose = &v1alpha1.TenantExpose{Ingress: &v1alpha1.IngressExpose{ClassName: "nginx", Host: "desk.example.com"}}
	}))
	owner := &v1alpha1.Tenant{}
	mustGet(t, ns, "desk", owner)
	eventually(t, "ingress", func() error {
		ing := &networkingv1.Ingress{}
		if err := get(ns, "desk-bus", ing); err != nil {
			return err
		}
		if err := isController(ing, owner); err != nil {
			return err
		}
		s := ing.Spec
		if s.IngressClassName == nil || *s.IngressClassName != "nginx" || s.DefaultBackend != nil || len(s.Rules) != 1 || s.Rules[0].Host != "desk.example.com" ||
			s.Rules[0].HTTP == nil || len(s.Rules[0].HTTP.Paths) != 1 {
			return fmt.Errorf("spec %+v", s)
		}
		p := s.Rules[0].HTTP.Paths[0]
		if p.Path != "/v1/tenants/desk/" || p.PathType == nil || *p.PathType != networkingv1.PathTypePrefix ||
			p.Backend.Service == nil || p.Backend.Service.Name != "desk-bus" || p.Backend.Service.Port.Number != HTTPPort {
			return fmt.Errorf("path %+v", p)
		}
		return nil
	})
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "desk", tn, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionFalse, v1alpha1.ReasonIngressPending)
	if tn.Status.ExternalEndpoint != "https://desk.example.com" {
		t.Errorf("externalEndpoint %q", tn.Status.ExternalEndpoint)
	}
	eventually(t, "ingress address", func() error {
		ing := &networkingv1.Ingress{}
		if err := get(ns, "desk-bus", ing); err != nil {
			return err
		}
		ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.7"}}
		return k8s.Status().Update(context.Background(), ing)
	})
	waitCondition(t, ns, "desk", tn, tenantGen, v1alpha1.ConditionExposed, metav1.ConditionTrue, v1alpha1.ReasonIngressAdmitted)
	if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionExposed); !strings.Contains(c.Message, "203.0.113.7") {
		t.Errorf("message %q lacks the address", c.Message)
	}
}

func TestTenantExposeValidation(t *testing.T) {
	ns := newNamespace(t)
	for _, tc := range []struct {
		name, want string
		mod        func(*v1alpha1.Tenant)
	}{
		{"both", "exactly one of gateway and ingress", func(t *v1alpha1.Tenant) {
			t.Spec.Expose = &v1alpha1.TenantExpose{Gateway: &v1alpha1.GatewayExpose{}, Ingress: &v1alpha1.IngressExpose{Host: "a.example.com"}}
		}},
		{"neither", "exactly one of gateway and ingress", func(t *v1alpha1.Tenant) { t.Spec.Expose = &v1alpha1.TenantExpose{} }},
		{"bad hostname", "hostnames", exposeGateway(nil, "Bus_Example")},
		{"bad trusted proxy", "every entry must be a CIDR", func(t *v1alpha1.Tenant) { t.Spec.TrustedProxies = []string{"10.0.0.0/8", "proxy.example"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := k8s.Create(context.Background(), newTenant(ns, "v", tc.mod))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
}

// TestTenantExposeWithoutGatewayAPI: a cluster without the Gateway API CRDs
// has no HTTPRoute mapping; a gateway expose then says so, and the phase
// neither fails nor writes.
func TestTenantExposeWithoutGatewayAPI(t *testing.T) {
	empty := meta.NewDefaultRESTMapper(nil)
	if ok, err := gatewayAPIInstalled(empty); ok || err != nil {
		t.Fatalf("empty mapper: installed %v, %v", ok, err)
	}
	withRoute := meta.NewDefaultRESTMapper(nil)
	withRoute.Add(httpRouteKind.WithVersion(gatewayv1.GroupVersion.Version), meta.RESTScopeNamespace)
	if ok, err := gatewayAPIInstalled(withRoute); !ok || err != nil {
		t.Fatalf("mapper with HTTPRoute: installed %v, %v", ok, err)
	}

	ns := newNamespace(t)
	tn := newTenant(ns, "nogw", exposeGateway(sharedGateway, "bus.example.com"))
	tn.Generation = 3
	r := &TenantWorkloadReconciler{objectWriter: objectWriter{Client: k8s, APIReader: k8s}, gatewayAPI: false}
	s := &workloadScope{tenant: tn}
	if _, err := r.reconcileExpose(context.Background(), s); err != nil {
		t.Fatalf("expose phase: %v", err)
	}
	applyExposeStatus(tn, s.expose)
	c := findCondition(tn.Status.Conditions, v1alpha1.ConditionExposed)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonGatewayAPINotInstalled ||
		!strings.Contains(c.Message, "install the Gateway API CRDs") || c.ObservedGeneration != 3 {
		t.Fatalf("condition %+v", c)
	}
}

// TestTenantExposeCondition decides the condition from route statuses.
func TestTenantExposeCondition(t *testing.T) {
	tn := newTenant("ns", "t", exposeGateway([]v1alpha1.GatewayParentRef{{Name: "a"}, {Name: "b", Namespace: "gw", SectionName: "https"}}))
	parent := func(name, ns, section string, accepted, resolved metav1.ConditionStatus) gatewayv1.RouteParentStatus {
		ref := gatewayv1.ParentReference{Name: gatewayv1.ObjectName(name)}
		if ns != "" {
			n := gatewayv1.Namespace(ns)
			ref.Namespace = &n
		}
		if section != "" {
			s := gatewayv1.SectionName(section)
			ref.SectionName = &s
		}
		return gatewayv1.RouteParentStatus{ParentRef: ref, Conditions: []metav1.Condition{
			{Type: "Accepted", Status: accepted, Reason: "R"}, {Type: "ResolvedRefs", Status: resolved, Reason: "BackendNotFound"}}}
	}
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	for _, tc := range []struct {
		name    string
		parents []gatewayv1.RouteParentStatus
		status  metav1.ConditionStatus
		reason  string
	}{
		{"no status", nil, F, v1alpha1.ReasonRoutePending},
		{"one of two", []gatewayv1.RouteParentStatus{parent("a", "", "", T, T)}, F, v1alpha1.ReasonRoutePending},
		{"other listener does not count", []gatewayv1.RouteParentStatus{parent("a", "", "", T, T), parent("b", "gw", "http", T, T)}, F, v1alpha1.ReasonRoutePending},
		{"both", []gatewayv1.RouteParentStatus{parent("a", "ns", "", T, T), parent("b", "gw", "https", T, T)}, T, v1alpha1.ReasonRouteAccepted},
		{"backend unresolved", []gatewayv1.RouteParentStatus{parent("a", "", "", T, F), parent("b", "gw", "https", T, T)}, F, v1alpha1.ReasonRouteNotAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &exposeObservation{parents: tn.Spec.Expose.Gateway.ParentRefs, route: &gatewayv1.HTTPRoute{Status: gatewayv1.HTTPRouteStatus{
				RouteStatus: gatewayv1.RouteStatus{Parents: tc.parents}}}}
			c := exposedCondition(tn, o)
			if c.Status != tc.status || c.Reason != tc.reason {
				t.Fatalf("%s/%s (%s), want %s/%s", c.Status, c.Reason, c.Message, tc.status, tc.reason)
			}
		})
	}
	if c := exposedCondition(tn, &exposeObservation{}); c.Reason != v1alpha1.ReasonNoGateway {
		t.Errorf("no parents: %s", c.Reason)
	}
}
