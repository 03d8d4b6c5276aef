package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BusPoolSpec is a set of bus replicas serving many workspaces over one
// external NATS JetStream cluster: the Tenants whose spec.pool names the
// pool. Adding, changing or removing a Tenant restarts no replica.
type BusPoolSpec struct {
	// Replicas is the number of bus replicas; at least 2, so that one can
	// be restarted while the others serve.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Image is the storybus image the replicas run. Default: the
	// operator's --bus-image.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Resources of the bus container. Default: the operator's bus
	// defaults.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// NATS is the cluster the replicas serve from: every placed
	// workspace's stream and buckets, and the pool's two buckets of
	// documents and statuses (docs/pools.md). The operator connects to it
	// too, to place workspaces and read what the replicas have in force.
	// +required
	NATS ExternalStorage `json:"nats"`

	// DrainPeriod is how long a stopping replica goes on answering, not
	// ready, before it finishes what is in progress (serve's
	// --drain-period); the pods' termination grace period is this plus
	// the 15 s the bus takes to finish, plus a margin.
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1m')",message="drainPeriod must be between 0s and 1m"
	// +optional
	DrainPeriod *metav1.Duration `json:"drainPeriod,omitempty"`

	// TLS has the replicas serve HTTPS on their publish port with the key
	// pair of a Secret. Unset: plain HTTP.
	// +optional
	TLS *BusPoolTLS `json:"tls,omitempty"`

	// Expose makes the pool reachable from outside the cluster through a
	// Gateway API HTTPRoute or an Ingress for the path prefix /v1/tenants/:
	// every workspace placed on the pool, under its own path.
	// +optional
	Expose *TenantExpose `json:"expose,omitempty"`

	// TrustedProxies are the CIDRs of the proxies whose X-Forwarded-For
	// the replicas believe. Unset or empty: the operator's
	// --trusted-proxies.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c))",message="every entry must be a CIDR such as 10.0.0.0/8"
	// +listType=atomic
	// +optional
	TrustedProxies []string `json:"trustedProxies,omitempty"`

	// Template customises the replicas' pods as a Tenant's does: their
	// scheduling, metadata and OpenTelemetry environment. Topology spread
	// constraints set here replace the operator's.
	// +optional
	Template *TenantTemplate `json:"template,omitempty"`

	// NetworkPolicy restricts who reaches the replicas and what they
	// reach, as a Tenant's does its bus pods: the publish port from
	// publishFrom (or the operator's defaults), egress to DNS and the
	// pool's NATS servers. Default: the operator's --network-policy.
	// +optional
	NetworkPolicy *TenantNetworkPolicy `json:"networkPolicy,omitempty"`

	// Monitoring says how Prometheus finds the replicas: a PodMonitor of
	// the Prometheus Operator, whose scrapes carry the pool's name as the
	// pool label. Default: the operator's --pod-monitor.
	// +optional
	Monitoring *TenantMonitoring `json:"monitoring,omitempty"`

	// SharedRecords bounds the idempotency records the pool's workspaces
	// keep in the buckets they share on the NATS cluster. Unset, this pool
	// asks for no bound; another pool on the cluster may set one for all
	// (docs/pools.md).
	// +optional
	SharedRecords *SharedRecords `json:"sharedRecords,omitempty"`

	// AllowedTenants says which namespaces may place Tenants on the pool.
	// Default: the pool's own namespace.
	// +kubebuilder:default={namespaces:{from:Same}}
	// +optional
	AllowedTenants *AllowedTenants `json:"allowedTenants,omitempty"`
}

// SharedRecords bounds the shared records buckets of a NATS cluster:
// each of them (one per idempotency window) holds at most MaxBytes, as
// JetStream counts a stream's bytes. A full bucket refuses a new record,
// and with it the message, 507 workspace.storage_full, and keeps every
// record it holds; room comes back as records age out of their window.
// The buckets are the cluster's, shared by every pool on it: each keeps
// the largest bound a pool has asked for (a pool without one asks for
// nothing), so lowering it is an edit of the bucket on the cluster
// (docs/pools.md).
//
// +kubebuilder:validation:XValidation:rule="quantity(string(self.maxBytes)).compareTo(quantity('1Mi')) >= 0 && quantity(string(self.maxBytes)).compareTo(quantity('1Pi')) <= 0",message="maxBytes must be between 1Mi and 1Pi"
type SharedRecords struct {
	// MaxBytes is the most each shared records bucket holds, from 1Mi to
	// 1Pi. A record takes about 260 bytes of it.
	// +required
	MaxBytes resource.Quantity `json:"maxBytes"`
}

// BusPoolTLS is the key pair a pool's replicas serve HTTPS with.
type BusPoolTLS struct {
	// SecretName names a kubernetes.io/tls Secret in the pool's namespace
	// holding tls.crt and tls.key; it is mounted, and a renewed pair is
	// reloaded without a restart. Its certificate must cover the names
	// producers use (the pool Service's, the exposed host names).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	SecretName string `json:"secretName"`
	// TenantHostnames, when set, are the only host names the pool's
	// Tenants may claim for their own key pairs (spec.tls), by namespace:
	// a Tenant's pair is presented only for the names of its certificate
	// that an entry of its namespace covers ("*.example.com" covers any
	// one label in front of example.com, and itself). A namespace with no
	// entry claims none. Unset, a Tenant may claim any name its
	// certificate names that is not the pool's or another Tenant's; an
	// empty list is refused (leave it unset, or list a namespace).
	// +listType=map
	// +listMapKey=namespace
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	TenantHostnames []TenantHostnames `json:"tenantHostnames,omitempty"`
}

// TenantHostnames are the host names one namespace's Tenants may claim
// for their own key pairs on a pool.
type TenantHostnames struct {
	// Namespace is the Tenants' namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Namespace string `json:"namespace"`
	// Hostnames are lower-case DNS names, the first label of each possibly
	// the wildcard "*".
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`
	// +listType=set
	// +required
	Hostnames []string `json:"hostnames"`
}

// AdmittedHostnames returns the host names spec.tls.tenantHostnames lets
// the Tenants of namespace claim, and whether the pool lists any at all
// (false: it bounds nothing).
func (p *BusPool) AdmittedHostnames(namespace string) ([]string, bool) {
	if p.Spec.TLS == nil || p.Spec.TLS.TenantHostnames == nil {
		return nil, false
	}
	for _, e := range p.Spec.TLS.TenantHostnames {
		if e.Namespace == namespace {
			return e.Hostnames, true
		}
	}
	return nil, true
}

// AllowedTenants says which Tenants may be placed on a pool, after Gateway
// API's allowedRoutes.
type AllowedTenants struct {
	// Namespaces are the namespaces whose Tenants may name the pool.
	// +kubebuilder:default={from:Same}
	// +optional
	Namespaces *TenantNamespaces `json:"namespaces,omitempty"`
}

// FromNamespaces says where Tenants may come from.
// +kubebuilder:validation:Enum=Same;All;Selector
type FromNamespaces string

// Where Tenants may come from.
const (
	// NamespacesFromSame admits the Tenants of the pool's own namespace.
	NamespacesFromSame FromNamespaces = "Same"
	// NamespacesFromAll admits the Tenants of every namespace.
	NamespacesFromAll FromNamespaces = "All"
	// NamespacesFromSelector admits the Tenants of the namespaces whose
	// labels match the selector.
	NamespacesFromSelector FromNamespaces = "Selector"
)

// TenantNamespaces selects namespaces as Gateway API's RouteNamespaces
// does.
//
// +kubebuilder:validation:XValidation:rule="(self.from == 'Selector') == has(self.selector)",message="selector goes with from: Selector, and from: Selector needs a selector"
type TenantNamespaces struct {
	// From is Same (the pool's namespace), All, or Selector (the
	// namespaces whose labels match Selector).
	// +kubebuilder:default=Same
	// +optional
	From FromNamespaces `json:"from,omitempty"`
	// Selector selects namespaces by their labels; only with from:
	// Selector.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// BusPoolStatus is what the operator observed of a pool.
type BusPoolStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the summary), ClusterReady, Available.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// PoolName is the pool's name on its NATS cluster, <namespace>_<name>:
	// its buckets are storybus-pool-<poolName> and
	// storybus-pool-<poolName>-status.
	// +optional
	PoolName string `json:"poolName,omitempty"`
	// Endpoint is the base URL of the pool's publish API inside the
	// cluster; a placed workspace's routes are under
	// /v1/tenants/<workspace>/.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// ExternalEndpoint is the base URL producers outside the cluster use,
	// through spec.expose. Empty without it.
	// +optional
	ExternalEndpoint string `json:"externalEndpoint,omitempty"`
	// Replicas is the number of replicas desired.
	// +kubebuilder:default=0
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas is the number of replicas ready.
	// +kubebuilder:default=0
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// Tenants is the number of Tenants placed on the pool: their
	// workspaces' documents are in its bucket.
	// +kubebuilder:default=0
	// +optional
	Tenants int32 `json:"tenants,omitempty"`
	// ReplicaStatuses say, for each replica pod, what it reports in the
	// pool's status bucket: one entry per replica, not per workspace.
	// +listType=map
	// +listMapKey=name
	// +optional
	ReplicaStatuses []BusPoolReplicaStatus `json:"replicaStatuses,omitempty"`
}

// BusPoolReplicaStatus is one replica's summary.
type BusPoolReplicaStatus struct {
	// Name is the replica's pod, and its name in the status bucket.
	// +required
	Name string `json:"name"`
	// Ready is the pod's readiness.
	// +required
	Ready bool `json:"ready"`
	// Workspaces is the number of workspaces the replica serves.
	// +required
	Workspaces int32 `json:"workspaces"`
	// Refused is the number of workspaces whose latest document the
	// replica refused (each keeps its previous document, if any); the
	// Tenant's ConfigurationLoaded condition says why.
	// +optional
	Refused int32 `json:"refused,omitempty"`
}

// BusPool is a set of bus replicas that serves the workspaces of many
// Tenants from one NATS cluster, without a pod per Tenant or a restart per
// change (docs/pools.md).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=storybus,shortName=sbp
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`,description="Bus replicas desired"
// +kubebuilder:printcolumn:name="Ready Replicas",type=integer,JSONPath=`.status.readyReplicas`,description="Bus replicas ready"
// +kubebuilder:printcolumn:name="Tenants",type=integer,JSONPath=`.status.tenants`,description="Tenants placed on the pool"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="True when the NATS cluster is reachable and every desired replica is ready"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Why Ready is what it is; the condition's message says more"
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1,description="Base URL of the pool's publish API inside the cluster"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`,description="Time since the pool was created"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="a BusPool's name must be a DNS label of at most 40 characters starting with a letter: it names the pool's StatefulSet, Services and pods"
type BusPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired pool.
	// +required
	Spec BusPoolSpec `json:"spec"`
	// Status is what the operator observed.
	// +optional
	Status BusPoolStatus `json:"status,omitempty"`
}

// PoolName is the pool's name on its NATS cluster: <namespace>_<name>,
// which no other pool's namespace and name make (an underscore is in
// neither).
func (p *BusPool) PoolName() string { return p.Namespace + "_" + p.Name }

// EffectiveReplicas returns spec.replicas, 3 when unset.
func (p *BusPool) EffectiveReplicas() int32 {
	if p.Spec.Replicas == nil {
		return 3
	}
	return *p.Spec.Replicas
}

// SharedRecordsMaxBytes returns spec.sharedRecords.maxBytes in bytes, 0
// when unset.
func (p *BusPool) SharedRecordsMaxBytes() int64 {
	if p.Spec.SharedRecords == nil {
		return 0
	}
	return p.Spec.SharedRecords.MaxBytes.Value()
}

// EffectiveStreamReplicas returns spec.nats.replicas, 3 when unset.
func (p *BusPool) EffectiveStreamReplicas() int32 {
	if p.Spec.NATS.Replicas == 0 {
		return 3
	}
	return p.Spec.NATS.Replicas
}

// EffectiveAllowedNamespaces returns spec.allowedTenants.namespaces, the
// pool's own namespace when unset.
func (p *BusPool) EffectiveAllowedNamespaces() TenantNamespaces {
	if a := p.Spec.AllowedTenants; a != nil && a.Namespaces != nil && a.Namespaces.From != "" {
		return *a.Namespaces
	}
	return TenantNamespaces{From: NamespacesFromSame}
}

// +kubebuilder:object:root=true

// BusPoolList is a list of BusPools.
type BusPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the BusPools.
	Items []BusPool `json:"items"`
}

// PoolReference names the BusPool a Tenant is placed on.
type PoolReference struct {
	// Name of the BusPool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +required
	Name string `json:"name"`
	// Namespace of the BusPool; default: the Tenant's. The pool's
	// spec.allowedTenants must admit the Tenant's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// PoolPlacement is the pool a Tenant's workspace document was last written
// to, and which document.
type PoolPlacement struct {
	// Namespace and Name are the BusPool's.
	// +required
	Namespace string `json:"namespace"`
	// +required
	Name string `json:"name"`
	// DocumentHash is the hash of the document in the pool's bucket (the
	// hash the replicas report): the compiled configuration of
	// status.configHash with its signing key and secret access keys
	// inline.
	// +optional
	DocumentHash string `json:"documentHash,omitempty"`
	// HostNames are the host names the replicas present the Tenant's own
	// key pair for (spec.tls): those of its certificate that overlap
	// neither the pool's own names nor a name another Tenant on the pool
	// holds.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	HostNames []string `json:"hostNames,omitempty"`
}

// ConditionPoolReady is a pooled Tenant's condition: True with reason
// Placed when its workspace's document is in its pool's bucket; False when
// the pool does not exist (PoolNotFound), does not admit the Tenant's
// namespace (NamespaceNotAllowed), cannot be reached (PoolUnreachable),
// serves the workspace id for another Tenant (WorkspaceConflict), cannot
// present the Tenant's own key pair (KeyPairNotServed), or refused the
// write (PoolWriteFailed). Absent on a dedicated Tenant.
const ConditionPoolReady = "PoolReady"

// ConditionClusterReady is a BusPool's condition: True when the operator
// is connected to the pool's NATS cluster and the pool's buckets are open;
// False with ClusterUnreachable otherwise.
const ConditionClusterReady = "ClusterReady"

// Reasons of the pool conditions.
const (
	// ReasonPlaced: the workspace's document is in the pool's bucket.
	ReasonPlaced = "Placed"
	// ReasonPoolNotFound: spec.pool names no BusPool.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonNamespaceNotAllowed: the pool's spec.allowedTenants does not
	// admit the Tenant's namespace.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonPoolUnreachable: the operator cannot reach the pool's NATS
	// cluster (or read its credentials).
	ReasonPoolUnreachable = "PoolUnreachable"
	// ReasonPoolWriteFailed: the pool's bucket refused the document (too
	// large, say); the message says why.
	ReasonPoolWriteFailed = "PoolWriteFailed"
	// ReasonConfigurationRefused: a replica of the pool refused the
	// workspace's document and serves the previous one (or none); the
	// message has the replica's error.
	ReasonConfigurationRefused = "ConfigurationRefused"
	// ReasonKeyPairNotServed: the Tenant has a key pair of its own
	// (spec.tls) that its pool cannot present yet: its Secret is missing
	// or holds no usable pair.
	ReasonKeyPairNotServed = "KeyPairNotServed"
	// ReasonClusterConnected: the operator reaches the pool's NATS
	// cluster and its buckets.
	ReasonClusterConnected = "ClusterConnected"
	// ReasonClusterUnreachable: the operator cannot connect to the pool's
	// NATS cluster, read its credentials, or open the pool's buckets.
	ReasonClusterUnreachable = "ClusterUnreachable"
	// ReasonAwaitingTenants: no Tenant is placed on the pool yet, and a
	// replica is ready only once it serves a workspace.
	ReasonAwaitingTenants = "AwaitingTenants"
)

// PoolFinalizer is the finalizer the operator puts on a Tenant placed on a
// pool: it removes the workspace from the pool, and applies the deletion
// policy to its data on the pool's cluster, before the Tenant goes.
const PoolFinalizer = "bus.storybus.io/pool"

// NetworkPolicyEnabled says whether the pool's NetworkPolicy is rendered,
// given the operator's default.
func (p *BusPool) NetworkPolicyEnabled(operatorDefault bool) bool {
	return p.Spec.NetworkPolicy.enabled(operatorDefault)
}

// PodMonitorEnabled says whether the pool's PodMonitor is written, given
// the operator's default.
func (p *BusPool) PodMonitorEnabled(operatorDefault bool) bool {
	return p.Spec.Monitoring.podMonitorEnabled(operatorDefault)
}
