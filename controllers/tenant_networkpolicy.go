package controllers

import (
	"cmp"
	"context"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/storybus/storybus/api/v1alpha1"
)

// NetworkPolicyOptions are the operator's defaults for the Tenants'
// NetworkPolicies.
type NetworkPolicyOptions struct {
	// Enabled renders a NetworkPolicy for every Tenant that does not say.
	Enabled bool
	// PublishNamespaces selects the namespaces (by label) allowed to reach
	// the publish port of Tenants that name no spec.networkPolicy.publishFrom:
	// the platform's gateway or ingress namespace.
	PublishNamespaces *metav1.LabelSelector
	// MonitoringNamespace may reach the operations port (the scraper's).
	MonitoringNamespace string
	// OperatorNamespace may reach the operations port too (the operator's
	// own namespace).
	OperatorNamespace string
	// DNSNamespace and DNSPods select the cluster's DNS servers, the only
	// destinations of the bus pods' DNS egress; empty takes
	// DefaultDNSNamespace and DefaultDNSPods.
	DNSNamespace string
	DNSPods      map[string]string
}

// The cluster DNS a NetworkPolicy's DNS egress goes to unless the operator
// is told otherwise: kube-system's kube-dns (CoreDNS keeps the label).
const DefaultDNSNamespace = "kube-system"

// DefaultDNSPods selects the cluster DNS's pods in DefaultDNSNamespace.
var DefaultDNSPods = map[string]string{"k8s-app": "kube-dns"}

// defaultNATSPort is the port of a NATS URL that names none.
const defaultNATSPort = 4222

// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete

// reconcileNetworkPolicy applies the Tenant's NetworkPolicy, or deletes the
// one it controls when the Tenant no longer wants it. A NetworkPolicy of
// that name the Tenant does not control is a conflict only when the Tenant
// wants its own.
func (r *TenantWorkloadReconciler) reconcileNetworkPolicy(ctx context.Context, s *workloadScope) (ctrl.Result, error) {
	t := s.tenant
	np := &networkingv1.NetworkPolicy{}
	if t.NetworkPolicyEnabled(r.NetworkPolicy.Enabled) {
		_, err := r.write(ctx, s, "NetworkPolicy", busName(t), np, desiredNetworkPolicy(t, r.NetworkPolicy))
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.deleteControlled(ctx, t, np)
}

// desiredNetworkPolicy is the Tenant's NetworkPolicy: the bus pods'
// sources and the Tenant's external NATS servers.
func desiredNetworkPolicy(t *v1alpha1.Tenant, o NetworkPolicyOptions) *networkingv1ac.NetworkPolicyApplyConfiguration {
	var natsURL string
	if st := t.Spec.Storage; st != nil && st.External != nil {
		natsURL = st.External.URL
	}
	return tenantFront(t).networkPolicy(t.Spec.NetworkPolicy, natsURL, o)
}

// networkPolicy lets into the bus pods only the publish port from the
// sources the platform names and the operations port from the monitoring
// and operator namespaces, and out of them only the cluster's DNS servers
// and the servers of natsURL (none when it is empty). The kubelet's probes
// are not subject to it.
func (f busFront) networkPolicy(spec *v1alpha1.TenantNetworkPolicy, natsURL string, o NetworkPolicyOptions) *networkingv1ac.NetworkPolicyApplyConfiguration {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(proto corev1.Protocol, p intstr.IntOrString) *networkingv1ac.NetworkPolicyPortApplyConfiguration {
		return networkingv1ac.NetworkPolicyPort().WithProtocol(proto).WithPort(p)
	}
	publish := networkingv1ac.NetworkPolicyIngressRule().
		WithPorts(port(tcp, intstr.FromInt32(HTTPPort))).
		WithFrom(publishPeers(spec, o)...)
	var opsFrom []*networkingv1ac.NetworkPolicyPeerApplyConfiguration
	for _, ns := range compactStrings(o.MonitoringNamespace, o.OperatorNamespace) {
		opsFrom = append(opsFrom, networkingv1ac.NetworkPolicyPeer().
			WithNamespaceSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{corev1.LabelMetadataName: ns})))
	}
	ingress := []*networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration{publish}
	if len(opsFrom) > 0 {
		ingress = append(ingress, networkingv1ac.NetworkPolicyIngressRule().
			WithPorts(port(tcp, intstr.FromInt32(OpsPort))).
			WithFrom(opsFrom...))
	}
	dns := intstr.FromInt32(53)
	dnsNamespace, dnsPods := cmp.Or(o.DNSNamespace, DefaultDNSNamespace), o.DNSPods
	if len(dnsPods) == 0 {
		dnsPods = DefaultDNSPods
	}
	egress := []*networkingv1ac.NetworkPolicyEgressRuleApplyConfiguration{
		networkingv1ac.NetworkPolicyEgressRule().WithPorts(port(udp, dns), port(tcp, dns)).
			WithTo(networkingv1ac.NetworkPolicyPeer().
				WithNamespaceSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{corev1.LabelMetadataName: dnsNamespace})).
				WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(dnsPods))),
	}
	egress = append(egress, natsEgress(natsURL)...)
	return networkingv1ac.NetworkPolicy(f.name, f.namespace).
		WithLabels(f.labels).
		WithOwnerReferences(f.owner).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(f.selector)).
			WithPolicyTypes(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress).
			WithIngress(ingress...).
			WithEgress(egress...))
}

// publishPeers are the sources of the publish port: the spec's
// publishFrom, else the operator's namespaces, else the pods' own
// namespace.
func publishPeers(spec *v1alpha1.TenantNetworkPolicy, o NetworkPolicyOptions) []*networkingv1ac.NetworkPolicyPeerApplyConfiguration {
	var out []*networkingv1ac.NetworkPolicyPeerApplyConfiguration
	if spec != nil && len(spec.PublishFrom) > 0 {
		for _, p := range spec.PublishFrom {
			peer := networkingv1ac.NetworkPolicyPeer()
			if p.NamespaceSelector != nil {
				peer = peer.WithNamespaceSelector(labelSelector(p.NamespaceSelector))
			}
			if p.PodSelector != nil {
				peer = peer.WithPodSelector(labelSelector(p.PodSelector))
			}
			if b := p.IPBlock; b != nil {
				peer = peer.WithIPBlock(networkingv1ac.IPBlock().WithCIDR(b.CIDR).WithExcept(b.Except...))
			}
			out = append(out, peer)
		}
		return out
	}
	if o.PublishNamespaces != nil {
		return []*networkingv1ac.NetworkPolicyPeerApplyConfiguration{
			networkingv1ac.NetworkPolicyPeer().WithNamespaceSelector(labelSelector(o.PublishNamespaces)),
		}
	}
	// A peer with a pod selector and no namespace selector: every pod of
	// the policy's own namespace.
	return []*networkingv1ac.NetworkPolicyPeerApplyConfiguration{
		networkingv1ac.NetworkPolicyPeer().WithPodSelector(metav1ac.LabelSelector()),
	}
}

// natsEgress are the egress rules to the servers of an external NATS URL
// (comma-separated URLs, as nats.go takes them): to the address itself when
// a server is given by IP, to its namespace when it is a cluster Service
// name (<service>.<namespace>.svc…), and else to its port anywhere, which
// is the most a NetworkPolicy can say of a host name.
func natsEgress(urls string) []*networkingv1ac.NetworkPolicyEgressRuleApplyConfiguration {
	var out []*networkingv1ac.NetworkPolicyEgressRuleApplyConfiguration
	for _, raw := range strings.Split(urls, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			continue
		}
		port := int32(defaultNATSPort)
		if p, err := strconv.ParseInt(u.Port(), 10, 32); err == nil {
			port = int32(p)
		}
		rule := networkingv1ac.NetworkPolicyEgressRule().
			WithPorts(networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(port)))
		host := u.Hostname()
		if addr, err := netip.ParseAddr(host); err == nil {
			rule = rule.WithTo(networkingv1ac.NetworkPolicyPeer().
				WithIPBlock(networkingv1ac.IPBlock().WithCIDR(netip.PrefixFrom(addr, addr.BitLen()).String())))
		} else if ns, ok := serviceNamespace(host); ok {
			rule = rule.WithTo(networkingv1ac.NetworkPolicyPeer().
				WithNamespaceSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{corev1.LabelMetadataName: ns})))
		}
		out = append(out, rule)
	}
	return out
}

// serviceNamespace is the namespace of a cluster Service host name,
// <service>.<namespace>.svc or longer.
func serviceNamespace(host string) (string, bool) {
	parts := strings.Split(strings.TrimSuffix(host, "."), ".")
	if len(parts) >= 3 && parts[2] == "svc" {
		return parts[1], true
	}
	return "", false
}

// labelSelector converts a label selector into its apply configuration.
func labelSelector(s *metav1.LabelSelector) *metav1ac.LabelSelectorApplyConfiguration {
	ac := metav1ac.LabelSelector()
	if len(s.MatchLabels) > 0 {
		ac = ac.WithMatchLabels(s.MatchLabels)
	}
	for _, e := range s.MatchExpressions {
		ac = ac.WithMatchExpressions(metav1ac.LabelSelectorRequirement().
			WithKey(e.Key).WithOperator(e.Operator).WithValues(e.Values...))
	}
	return ac
}

// compactStrings returns the non-empty strings of ss, without duplicates.
func compactStrings(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
