package controllers

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TestTenantNetworkPolicy proves what a Tenant's NetworkPolicy lets in and
// out: the publish port from the sources the Tenant names (else its own
// namespace only), the operations port from the monitoring namespace only,
// egress to the cluster's DNS servers and to each external NATS server (by address, by Service
// namespace, or by port for a host name); none for a Tenant that does not
// ask (the operator's default here), and the policy goes when the Tenant
// turns it off.
func TestTenantNetworkPolicy(t *testing.T) {
	ns := newNamespace(t)
	gateway := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "gateway-system"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "envoy"}},
	}
	create(t, newTenant(ns, "fenced", func(tn *v1alpha1.Tenant) {
		tn.Spec.NetworkPolicy = &v1alpha1.TenantNetworkPolicy{Enabled: new(true), PublishFrom: []networkingv1.NetworkPolicyPeer{gateway}}
		tn.Spec.Storage = &v1alpha1.TenantStorage{External: &v1alpha1.ExternalStorage{
			URL: "nats://nats.messaging.svc.cluster.local:4222, nats://10.0.0.7:4223,tls://nats.example.com",
		}}
	}))
	create(t, newTenant(ns, "home", func(tn *v1alpha1.Tenant) {
		tn.Spec.NetworkPolicy = &v1alpha1.TenantNetworkPolicy{Enabled: new(true)}
	}))
	// A NetworkPolicy of the user's that happens to have the name the
	// operator would use: left alone while the Tenant wants none.
	userPolicy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "open-bus"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	create(t, userPolicy)
	create(t, newTenant(ns, "open"))

	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	portOf := func(proto corev1.Protocol, n int) networkingv1.NetworkPolicyPort {
		p := intstr.FromInt32(int32(n))
		return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &p}
	}
	nsPeer := func(name string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: name}}}
	}
	ops := networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{portOf(tcp, OpsPort)}, From: []networkingv1.NetworkPolicyPeer{nsPeer(DefaultMonitoringNamespace)}}
	// DNS only to the cluster's DNS servers, not to port 53 anywhere.
	kubeDNS := nsPeer("kube-system")
	kubeDNS.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}
	dns := networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{portOf(udp, 53), portOf(tcp, 53)}, To: []networkingv1.NetworkPolicyPeer{kubeDNS}}
	want := map[string]networkingv1.NetworkPolicySpec{
		"fenced": {
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{portOf(tcp, HTTPPort)}, From: []networkingv1.NetworkPolicyPeer{gateway}},
				ops,
			},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				dns,
				{Ports: []networkingv1.NetworkPolicyPort{portOf(tcp, 4222)}, To: []networkingv1.NetworkPolicyPeer{nsPeer("messaging")}},
				{Ports: []networkingv1.NetworkPolicyPort{portOf(tcp, 4223)}, To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.7/32"}}}},
				{Ports: []networkingv1.NetworkPolicyPort{portOf(tcp, 4222)}},
			},
		},
		"home": {
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{portOf(tcp, HTTPPort)}, From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}},
				ops,
			},
			Egress: []networkingv1.NetworkPolicyEgressRule{dns},
		},
	}
	for name, spec := range want {
		tn := &v1alpha1.Tenant{}
		mustGet(t, ns, name, tn)
		spec.PodSelector = metav1.LabelSelector{MatchLabels: selectorLabels(tn)}
		spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
		eventually(t, "the NetworkPolicy of "+name, func() error {
			np := &networkingv1.NetworkPolicy{}
			if err := get(ns, name+"-bus", np); err != nil {
				return err
			}
			if err := isController(np, tn); err != nil {
				return err
			}
			if !reflect.DeepEqual(np.Spec, spec) {
				return fmt.Errorf("spec\n got %+v\nwant %+v", np.Spec, spec)
			}
			return nil
		})
	}

	// The operator's default here is off: a Tenant that does not ask
	// gets none, and one that turns it off loses its own.
	open := &v1alpha1.Tenant{}
	waitCondition(t, ns, "open", open, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
	if c := findCondition(open.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Reason == v1alpha1.ReasonNameConflict {
		t.Errorf("Tenant open: %s", c.Message)
	}
	np := &networkingv1.NetworkPolicy{}
	mustGet(t, ns, "open-bus", np)
	if np.UID != userPolicy.UID || len(np.OwnerReferences) != 0 || len(np.Spec.Ingress) != 0 {
		t.Errorf("the user's NetworkPolicy was changed: %+v", np)
	}
	update(t, ns, "home", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.NetworkPolicy.Enabled = new(false) })
	eventually(t, "the NetworkPolicy of home deleted", func() error {
		return gone(ns, "home-bus", &networkingv1.NetworkPolicy{})
	})
}
