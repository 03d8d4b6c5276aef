package v1alpha1

import (
	networkingv1 "k8s.io/api/networking/v1"
)

// TenantNetworkPolicy is the NetworkPolicy the operator renders for a
// Tenant's bus pods: the publish port open to the platform's gateway or
// ingress only, the operations port to the monitoring namespace and the
// operator's, and egress to DNS and the external NATS servers only.
type TenantNetworkPolicy struct {
	// Enabled renders the NetworkPolicy (true) or not (false). Default:
	// the operator's --network-policy.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// PublishFrom are the sources allowed to reach the publish port: the
	// platform's gateway or ingress controller pods, by namespace and pod
	// labels, or address blocks. Default: the operator's
	// --network-policy-publish-namespaces; with neither, the pods of the
	// Tenant's own namespace only.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	PublishFrom []networkingv1.NetworkPolicyPeer `json:"publishFrom,omitempty"`
}

// NetworkPolicyEnabled says whether the Tenant's NetworkPolicy is rendered,
// given the operator's default.
func (t *Tenant) NetworkPolicyEnabled(operatorDefault bool) bool {
	return t.Spec.NetworkPolicy.enabled(operatorDefault)
}

// enabled is np's Enabled, the operator's default when np does not say.
func (np *TenantNetworkPolicy) enabled(operatorDefault bool) bool {
	if np != nil && np.Enabled != nil {
		return *np.Enabled
	}
	return operatorDefault
}
