package v1alpha1

// TenantExpose makes a Tenant's bus reachable from outside the cluster
// through the platform's Gateway or ingress controller: exactly one of
// Gateway and Ingress. The route sends the path prefix
// /v1/tenants/<workspace>/, and nothing else, to the Tenant's bus Service,
// so many Tenants can share one Gateway and host name.
//
// +kubebuilder:validation:XValidation:rule="has(self.gateway) != has(self.ingress)",message="set exactly one of gateway and ingress"
type TenantExpose struct {
	// Gateway has the operator write a Gateway API HTTPRoute
	// (gateway.networking.k8s.io/v1) attached to the platform's Gateway.
	// +optional
	Gateway *GatewayExpose `json:"gateway,omitempty"`
	// Ingress has the operator write a networking.k8s.io/v1 Ingress.
	// +optional
	Ingress *IngressExpose `json:"ingress,omitempty"`
}

// GatewayExpose is an HTTPRoute attached to one or more Gateways the
// platform owns.
type GatewayExpose struct {
	// ParentRefs are the Gateways (or their listeners) the route attaches
	// to. Default: the operator's --expose-gateway.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	ParentRefs []GatewayParentRef `json:"parentRefs,omitempty"`
	// Hostnames the route answers for; empty answers for every host name of
	// the Gateway's listeners. The first one makes status.externalEndpoint.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +listType=atomic
	// +optional
	Hostnames []string `json:"hostnames,omitempty"`
}

// GatewayParentRef names a Gateway, and optionally one of its listeners.
type GatewayParentRef struct {
	// Name of the Gateway.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Namespace of the Gateway; default: the Tenant's namespace. The
	// Gateway's listeners must allow routes from the Tenant's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// SectionName is the listener of the Gateway to attach to; default:
	// every listener that accepts the route.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	SectionName string `json:"sectionName,omitempty"`
}

// IngressExpose is an Ingress for one host name.
type IngressExpose struct {
	// ClassName is the IngressClass; default: the cluster's default class.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ClassName string `json:"className,omitempty"`
	// Host is the host name producers reach the bus at.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Host string `json:"host"`
}

// ConditionExposed is a Tenant's condition while spec.expose is set: True
// with reason RouteAccepted when every Gateway accepted the HTTPRoute and
// resolved its backend, or IngressAdmitted when the ingress controller gave
// the Ingress an address; False otherwise, with the reason below. Absent
// without spec.expose. It does not count towards Ready: the bus serves
// inside the cluster meanwhile.
const ConditionExposed = "Exposed"

// Reasons of ConditionExposed.
const (
	// ReasonRouteAccepted: every parent Gateway reports the HTTPRoute
	// Accepted and ResolvedRefs.
	ReasonRouteAccepted = "RouteAccepted"
	// ReasonRoutePending: a parent Gateway has not reported on the
	// HTTPRoute yet (no Gateway controller, or not yet).
	ReasonRoutePending = "RoutePending"
	// ReasonRouteNotAccepted: a parent Gateway reports the HTTPRoute not
	// Accepted or its backend not resolved; the message carries its
	// reason.
	ReasonRouteNotAccepted = "RouteNotAccepted"
	// ReasonGatewayAPINotInstalled: spec.expose.gateway is set and the
	// cluster has no Gateway API HTTPRoute kind.
	ReasonGatewayAPINotInstalled = "GatewayAPINotInstalled"
	// ReasonNoGateway: spec.expose.gateway names no parentRefs and the
	// operator has no --expose-gateway.
	ReasonNoGateway = "NoGateway"
	// ReasonIngressAdmitted: the Ingress has a load-balancer address.
	ReasonIngressAdmitted = "IngressAdmitted"
	// ReasonIngressPending: the Ingress has no load-balancer address yet.
	ReasonIngressPending = "IngressPending"
)

// TenantPathPrefix is the path prefix of a workspace's publish API: every
// route of the bus a producer calls starts with it.
func TenantPathPrefix(workspaceID string) string {
	return "/v1/tenants/" + workspaceID + "/"
}
