package controllers

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TestExposedHostsGetTheTenantsTLS: the Certificate covers the host names
// a Tenant is exposed under, and an Ingress terminates TLS with the
// Tenant's key pair.
func TestExposedHostsGetTheTenantsTLS(t *testing.T) {
	tenant := func(tls *v1alpha1.TenantTLS, ex *v1alpha1.TenantExpose) *v1alpha1.Tenant {
		return &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "desk", Namespace: "news"},
			Spec: v1alpha1.TenantSpec{TLS: tls, Expose: ex}}
	}
	issuer := &v1alpha1.TenantTLS{IssuerRef: &v1alpha1.IssuerReference{Name: "ca"}}
	ingress := &v1alpha1.TenantExpose{Ingress: &v1alpha1.IngressExpose{Host: "desk.example.com"}}
	gateway := &v1alpha1.TenantExpose{Gateway: &v1alpha1.GatewayExpose{Hostnames: []string{"bus.example.com", "*.example.org"}}}

	for _, tc := range []struct {
		name string
		t    *v1alpha1.Tenant
		want []string
	}{
		{"ingress host", tenant(issuer, ingress), []string{"desk.example.com"}},
		{"route host names", tenant(issuer, gateway), []string{"bus.example.com", "*.example.org"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names := certificateDNSNames(tc.t, "cluster.local")
			for _, w := range tc.want {
				if !slices.Contains(names, w) {
					t.Errorf("DNS names %v lack %s", names, w)
				}
			}
		})
	}

	t.Run("ingress TLS", func(t *testing.T) {
		in := desiredIngress(tenant(issuer, ingress))
		if len(in.Spec.TLS) != 1 || *in.Spec.TLS[0].SecretName != "desk-tls" || !slices.Equal(in.Spec.TLS[0].Hosts, []string{"desk.example.com"}) {
			t.Fatalf("ingress TLS %+v", in.Spec.TLS)
		}
		provided := desiredIngress(tenant(&v1alpha1.TenantTLS{SecretName: "desk-cert"}, ingress))
		if len(provided.Spec.TLS) != 1 || *provided.Spec.TLS[0].SecretName != "desk-cert" {
			t.Fatalf("ingress TLS with a provided Secret %+v", provided.Spec.TLS)
		}
		if plain := desiredIngress(tenant(nil, ingress)); len(plain.Spec.TLS) != 0 {
			t.Fatalf("ingress without spec.tls has TLS %+v", plain.Spec.TLS)
		}
	})
}
