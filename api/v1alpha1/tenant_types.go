package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletionPolicy says what happens to a Tenant's stored data when the Tenant
// is deleted.
// +kubebuilder:validation:Enum=retain;delete
type DeletionPolicy string

// Deletion policies.
const (
	// DeletionPolicyRetain keeps the bus's volumes (and so its idempotency
	// records, story heads and topic) after the Tenant is deleted.
	DeletionPolicyRetain DeletionPolicy = "retain"
	// DeletionPolicyDelete deletes the bus's volumes with the Tenant.
	DeletionPolicyDelete DeletionPolicy = "delete"
)

// Embedded JetStream fsync modes (the bus's --sync flag).
const (
	SyncAlways   = "always"
	SyncInterval = "interval"
)

// TenantSpec is a newsroom's bus workspace: how many bus replicas run, where
// they store, and the workspace-wide settings of its configuration.
//
// +kubebuilder:validation:XValidation:rule="has(self.workspaceID) == has(oldSelf.workspaceID)",message="workspaceID is immutable: it can be neither set nor removed after creation"
// +kubebuilder:validation:XValidation:rule="!has(self.pool) || !has(oldSelf.pool) || (has(self.idempotencyWindow) ? duration(self.idempotencyWindow) : duration('168h')) == (has(oldSelf.idempotencyWindow) ? duration(oldSelf.idempotencyWindow) : duration('168h'))",message="idempotencyWindow of a Tenant on a pool cannot change: its records are kept in the pool's bucket of that window"
// +kubebuilder:validation:XValidation:rule="!has(self.capacity) || !has(self.capacity.topic) || !has(self.capacity.topic.maxAge) || !has(self.idempotencyWindow) || duration(self.capacity.topic.maxAge) >= duration(self.idempotencyWindow)",message="capacity.topic.maxAge must be at least idempotencyWindow"
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || !has(self.storage.embedded) || !has(self.replicas) || self.replicas <= 1",message="embedded storage serves one replica; use storage.external to run more"
// +kubebuilder:validation:XValidation:rule="!has(self.pool) || !has(self.tls) || !has(self.tls.issuerRef) || (has(self.tls.dnsNames) && size(self.tls.dnsNames) > 0) || (has(self.expose) && (has(self.expose.ingress) || (has(self.expose.gateway) && has(self.expose.gateway.hostnames) && size(self.expose.gateway.hostnames) > 0)))",message="a pooled Tenant has no Service of its own: with spec.tls.issuerRef its certificate covers spec.tls.dnsNames and the host names of spec.expose, so set one of them"
type TenantSpec struct {
	// WorkspaceID is the workspace id: the {t} of every route, the audience
	// of its tokens, and part of its stream and bucket names. Default: the
	// Tenant's name. Immutable.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="workspaceID is immutable"
	// +optional
	WorkspaceID string `json:"workspaceID,omitempty"`

	// Replicas is the number of bus pods. Embedded storage allows 0 or 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Image is the storybus image the bus pods run. Default: the operator's
	// --bus-image.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Resources of the bus container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Storage is where the bus keeps its records, story heads and topic.
	// Default: embedded JetStream on a 10Gi volume.
	// +kubebuilder:default={embedded:{}}
	// +optional
	Storage *TenantStorage `json:"storage,omitempty"`

	// IdempotencyWindow is how long a message_id is remembered; at least
	// 168h.
	// +kubebuilder:default="168h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('168h')",message="idempotencyWindow must be at least 168h (7 days)"
	// +optional
	IdempotencyWindow *metav1.Duration `json:"idempotencyWindow,omitempty"`

	// TokenTTL is the lifetime of the access tokens the workspace issues,
	// between 1m and 24h.
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('24h')",message="tokenTTL must be between 1m and 24h"
	// +optional
	TokenTTL *metav1.Duration `json:"tokenTTL,omitempty"`

	// Limits are the rate limit and daily quota of Connections that set
	// none.
	// +optional
	Limits *Limits `json:"limits,omitempty"`

	// Firewall holds the workspace's request rules (403 request.blocked).
	// +optional
	Firewall *Firewall `json:"firewall,omitempty"`

	// NetworkPolicy restricts who reaches the bus pods and what they reach.
	// Default: the operator's --network-policy.
	// +optional
	NetworkPolicy *TenantNetworkPolicy `json:"networkPolicy,omitempty"`

	// Policies are the workspace's own Rego modules, decided at stage 12
	// after the bus's own ownership rule.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Policies []PolicyModule `json:"policies,omitempty"`

	// Capacity bounds what the workspace may hold of each bus pod at once,
	// so that its load cannot starve another workspace the pod serves, and
	// of its store: its topic's bytes and messages.
	// +optional
	Capacity *TenantCapacity `json:"capacity,omitempty"`

	// Sandbox makes the workspace a sandbox for producers' tests: a publish
	// request may ask for any answer of the publish routes with the
	// Storybus-Sandbox-Answer header, and nothing is recorded or published
	// for it. A workspace that is not a sandbox refuses the header. Never
	// for a production workspace.
	// +optional
	Sandbox bool `json:"sandbox,omitempty"`

	// DeletionPolicy says what happens to the bus's volumes when the Tenant
	// is deleted: retain (the default) keeps them, delete deletes them.
	// +kubebuilder:default=retain
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// TLS has the bus serve HTTPS on its publish port, with a provided
	// Secret or a cert-manager Certificate. Unset: plain HTTP. On a pool,
	// whose replicas serve HTTPS with the pool's key pair, the Tenant's
	// pair is presented to the clients that name one of its certificate's
	// host names (SNI).
	// +optional
	TLS *TenantTLS `json:"tls,omitempty"`

	// Template customises what the operator makes for the Tenant's bus
	// beyond the fields above: today its pods' scheduling and metadata.
	// +optional
	Template *TenantTemplate `json:"template,omitempty"`

	// Expose makes the bus reachable from outside the cluster through a
	// Gateway API HTTPRoute or an Ingress for its path prefix. On a pool,
	// the route sends that prefix to the pool's Service; the Ingress is
	// then in the pool's namespace (docs/pools.md).
	// +optional
	Expose *TenantExpose `json:"expose,omitempty"`

	// TrustedProxies are the CIDRs of the proxies (the Gateway's or ingress
	// controller's pods) whose X-Forwarded-For the bus believes: a request
	// from one of them is decided on the producer's address. Unset or
	// empty: the operator's --trusted-proxies (by default none).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c))",message="every entry must be a CIDR such as 10.0.0.0/8"
	// +listType=atomic
	// +optional
	TrustedProxies []string `json:"trustedProxies,omitempty"`

	// Monitoring says how Prometheus finds the bus pods: a PodMonitor of
	// the Prometheus Operator.
	// +optional
	Monitoring *TenantMonitoring `json:"monitoring,omitempty"`

	// Pool places the workspace on a BusPool instead of a bus of its own:
	// the pool's replicas serve it, and the Tenant gets no StatefulSet,
	// volume or Service. Replicas, image, resources, storage, template,
	// networkPolicy, monitoring, trustedProxies and TLS (its key pair) are
	// then the pool's; everything else (Connections, Grants,
	// OwnershipPolicies, limits, firewall, policies, capacity, sandbox,
	// deletionPolicy, expose: the workspace's path on its own host names,
	// sent to the pool) means what it means on a bus of its own. Moving
	// between a pool and a bus of its own does not move the workspace's
	// stream (docs/pools.md).
	// +optional
	Pool *PoolReference `json:"pool,omitempty"`
}

// TenantTemplate customises the objects the operator makes for a Tenant.
type TenantTemplate struct {
	// Pod customises the bus pods.
	// +optional
	Pod *PodTemplate `json:"pod,omitempty"`
}

// PodTemplate is what a platform team may set on a Tenant's bus pods: their
// scheduling, image pull Secrets, extra metadata and the OpenTelemetry
// environment of the bus container. Everything else of the pod is the
// operator's.
type PodTemplate struct {
	// Metadata holds extra labels and annotations of the bus pods. The
	// labels the operator selects its pods by, and annotations of
	// bus.storybus.io, cannot be set.
	// +optional
	Metadata *PodTemplateMetadata `json:"metadata,omitempty"`
	// ImagePullSecrets name Secrets in the Tenant's namespace that the
	// kubelet uses to pull the bus image.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// NodeSelector restricts the bus pods to nodes with these labels.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations let the bus pods run on tainted nodes.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Affinity is the bus pods' node, pod and anti-pod affinity.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// TopologySpreadConstraints spread the bus pods over zones or nodes.
	// Their labelSelector must select by the bus pods' own labels
	// (app.kubernetes.io/instance is the Tenant's name).
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// PriorityClassName is the bus pods' PriorityClass.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Env sets OpenTelemetry's standard environment variables (OTEL_*) on
	// the bus container: OTEL_EXPORTER_OTLP_ENDPOINT turns tracing on,
	// OTEL_TRACES_SAMPLER and the others tune it; a value may come from a
	// Secret (an OTLP header holding an API key). Only OTEL_ names: the
	// rest of the bus's environment is the operator's.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(e, e.name.startsWith('OTEL_'))",message="only OpenTelemetry's OTEL_* variables can be set on the bus container"
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
}

// PodTemplateMetadata is extra metadata of the bus pods.
type PodTemplateMetadata struct {
	// Labels are added to the bus pods' labels.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="!self.exists(k, k in ['app.kubernetes.io/name', 'app.kubernetes.io/component', 'app.kubernetes.io/instance', 'app.kubernetes.io/managed-by'] || k.startsWith('bus.storybus.io/'))",message="the labels app.kubernetes.io/name, component, instance and managed-by, and those of bus.storybus.io, are the operator's: it selects its pods by them"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are added to the bus pods' annotations.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="!self.exists(k, k.startsWith('bus.storybus.io/'))",message="annotations of bus.storybus.io are the operator's"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// TenantStorage selects the store: exactly one of Embedded and External.
//
// +kubebuilder:validation:XValidation:rule="has(self.embedded) != has(self.external)",message="set exactly one of embedded and external"
// +kubebuilder:validation:XValidation:rule="has(self.embedded) == has(oldSelf.embedded)",message="the kind of storage (embedded or external) is immutable"
type TenantStorage struct {
	// Embedded runs JetStream inside the bus process on a volume per pod.
	// +optional
	Embedded *EmbeddedStorage `json:"embedded,omitempty"`
	// External connects the bus to an external NATS cluster.
	// +optional
	External *ExternalStorage `json:"external,omitempty"`
}

// ConditionVolumeExpansion is a Tenant's condition while and after its
// volumes grow to a larger spec.storage.embedded.size: True with reason
// VolumesExpanded when every volume has the size, False with
// VolumeExpanding while one grows, False with VolumeExpansionNotSupported
// when its StorageClass does not allow it. Absent while the size never
// changed. It does not count towards Ready: the bus serves meanwhile.
const ConditionVolumeExpansion = "VolumeExpansion"

// Reasons of ConditionVolumeExpansion.
const (
	// ReasonVolumesExpanded: every volume has the size asked for.
	ReasonVolumesExpanded = "VolumesExpanded"
	// ReasonVolumeExpanding: a volume claim asks the new size and the
	// storage has not yet provided it.
	ReasonVolumeExpanding = "VolumeExpanding"
	// ReasonVolumeExpansionNotSupported: a volume's StorageClass does not
	// allow expansion (allowVolumeExpansion), so it keeps its size.
	ReasonVolumeExpansionNotSupported = "VolumeExpansionNotSupported"
)

// EmbeddedStorage is a volume for the embedded JetStream of each bus pod.
//
// +kubebuilder:validation:XValidation:rule="has(self.size) == has(oldSelf.size) && (!has(self.size) || quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0)",message="size can only grow: a volume cannot shrink; set it to at least its current size"
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storageClassName is immutable"
type EmbeddedStorage struct {
	// Size of each pod's volume. It can grow, never shrink: the operator
	// expands the volume claims when their StorageClass allows it
	// (allowVolumeExpansion) and reports it in the VolumeExpansion
	// condition.
	// +kubebuilder:default="10Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`
	// StorageClassName of the volumes; unset uses the cluster's default.
	// Immutable.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
	// Sync is the JetStream fsync mode: always (every message, the
	// default; records are flushed asynchronously and rebuilt from the
	// topic after a crash) or interval.
	// +kubebuilder:validation:Enum=always;interval
	// +kubebuilder:default=always
	// +optional
	Sync string `json:"sync,omitempty"`
}

// ExternalStorage is an external NATS cluster with JetStream.
type ExternalStorage struct {
	// URL of the cluster; several servers are separated by commas.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(nats|tls|ws|wss)://`
	// +required
	URL string `json:"url"`
	// CredentialsSecretRef names a Secret key holding a NATS credentials
	// file. The key defaults to "nats.creds".
	// +optional
	CredentialsSecretRef *SecretKeyReference `json:"credentialsSecretRef,omitempty"`
	// Replicas of every stream and bucket the bus creates.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
}

// Firewall rules refuse requests with 403 request.blocked.
type Firewall struct {
	// AllowedCIDRs, when not empty, are the only client addresses let in.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c))",message="every entry must be a CIDR such as 10.0.0.0/8"
	// +optional
	AllowedCIDRs []string `json:"allowedCIDRs,omitempty"`
	// ContentTypes, when not empty, are the only media types let in.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=255
	// +optional
	ContentTypes []string `json:"contentTypes,omitempty"`
	// MaxJSONDepth, when set, refuses deeper bodies.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxJSONDepth int32 `json:"maxJSONDepth,omitempty"`
	// BlockedPatterns are Go regular expressions refused anywhere in the
	// body.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=1024
	// +optional
	BlockedPatterns []string `json:"blockedPatterns,omitempty"`
}

// PolicyModule is one of the workspace's own Rego modules. Its package must
// be storybus.tenant.<name>; its deny and warn sets hold objects {rule,
// message, path} whose rule ids it declares in Rules.
type PolicyModule struct {
	// Name names the module; its package is storybus.tenant.<name>.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]{0,62}$`
	// +required
	Name string `json:"name"`
	// Rego is the module's source, in Rego v1 syntax.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=262144
	// +required
	Rego string `json:"rego"`
	// Rules declares every rule id the module can emit.
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=id
	// +optional
	Rules []TenantRule `json:"rules,omitempty"`
}

// TenantRule is a rule a workspace's own module declares. Its id starts with
// "tenant.", so it never shadows one of the bus's rules.
type TenantRule struct {
	// ID is the rule id answered in violations.
	// +kubebuilder:validation:Pattern=`^tenant\.[A-Za-z0-9_.-]{1,120}$`
	// +required
	ID string `json:"id"`
	// Status is 403 or 409 for a refusal; 0 (or unset) for a rule that is
	// only ever a warning.
	// +kubebuilder:validation:Enum=0;403;409
	// +optional
	Status int32 `json:"status,omitempty"`
	// Meaning says what the rule checks.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Meaning string `json:"meaning,omitempty"`
	// Fix says how a producer fixes a refused message.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Fix string `json:"fix,omitempty"`
}

// TenantStatus is what the operator observed of the Tenant's bus.
type TenantStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the summary), ConfigurationValid, Available,
	// ConfigurationLoaded; VolumeExpansion and CertificateReady when they
	// apply.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// WorkspaceID is the workspace id in force (spec.workspaceID or the
	// Tenant's name).
	// +optional
	WorkspaceID string `json:"workspaceID,omitempty"`
	// Endpoint is the base URL of the publish API inside the cluster:
	// https:// when spec.tls is set.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// ExternalEndpoint is the base URL producers outside the cluster use,
	// through spec.expose: https:// and its host name. Empty without
	// spec.expose, or when a gateway expose names no hostnames.
	// +optional
	ExternalEndpoint string `json:"externalEndpoint,omitempty"`
	// Replicas is the number of bus pods desired.
	// +kubebuilder:default=0
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas is the number of bus pods ready.
	// +kubebuilder:default=0
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// ConfigHash is the hash of the workspace configuration compiled into
	// the Tenant's ConfigMap ("sha256:" and the hex digest of the document).
	// +optional
	ConfigHash string `json:"configHash,omitempty"`
	// ConfigGeneration counts the configurations compiled into the
	// ConfigMap: it grows by one each time ConfigHash changes.
	// +optional
	ConfigGeneration int64 `json:"configGeneration,omitempty"`
	// LoadedConfigHash is the configuration every ready bus pod reports
	// having loaded on its operations port (/configz); empty while no pod
	// is ready or the ready pods serve different configurations.
	// +optional
	LoadedConfigHash string `json:"loadedConfigHash,omitempty"`
	// Connections is the number of Connections in the configuration.
	// +kubebuilder:default=0
	// +optional
	Connections int32 `json:"connections,omitempty"`
	// Compiled lists the Connections, Grants and OwnershipPolicies, at the
	// generation read, that the configuration of ConfigHash was compiled
	// from. An object is in force when it is listed here at its current
	// generation and LoadedConfigHash equals ConfigHash.
	// +listType=atomic
	// +optional
	Compiled []CompiledObject `json:"compiled,omitempty"`
	// Pool is the pool the workspace is placed on, from the moment its
	// stream is opened on the pool's cluster (its documentHash once its
	// document is in the pool's bucket): a Tenant moved off a pool or
	// deleted has its document removed from there first, and a deleted
	// one its data as its deletion policy says.
	// +optional
	Pool *PoolPlacement `json:"pool,omitempty"`
}

// CompiledObject is one object a Tenant's configuration was compiled from.
type CompiledObject struct {
	// Kind is Connection, Grant or OwnershipPolicy.
	// +required
	Kind string `json:"kind"`
	// Name is the object's name, in the Tenant's namespace.
	// +required
	Name string `json:"name"`
	// Generation is the object's metadata.generation that was compiled.
	// +required
	Generation int64 `json:"generation"`
	// CredentialsRotatedAt is, for a Connection, the rotation time of the
	// credentials compiled (the credentials Secret's rotated-at).
	// +optional
	CredentialsRotatedAt *metav1.Time `json:"credentialsRotatedAt,omitempty"`
}

// Tenant is a newsroom's bus workspace. The operator runs a StatefulSet of
// bus pods for it, serving the workspace configuration it compiles from the
// Tenant and the Connections, Grants and OwnershipPolicies that refer to it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=storybus,shortName=sbt
// +kubebuilder:printcolumn:name="Workspace",type=string,JSONPath=`.status.workspaceID`,description="The workspace id in force: the {t} of the publish routes"
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`,description="Bus pods desired"
// +kubebuilder:printcolumn:name="Ready Replicas",type=integer,JSONPath=`.status.readyReplicas`,description="Bus pods ready"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="True when every desired bus pod serves the current configuration"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Why Ready is what it is; the condition's message says more"
// +kubebuilder:printcolumn:name="Connections",type=integer,JSONPath=`.status.connections`,priority=1,description="Connections in the compiled configuration"
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1,description="Base URL of the publish API inside the cluster"
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool.name`,priority=1,description="The BusPool serving the workspace; empty for a bus of its own"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`,description="Time since the Tenant was created"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="a Tenant's name must be a DNS label of at most 40 characters starting with a letter: it names the bus's StatefulSet, Services and pods"
type Tenant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired workspace.
	// +kubebuilder:default={}
	// +optional
	Spec TenantSpec `json:"spec,omitempty"`
	// Status is what the operator observed.
	// +optional
	Status TenantStatus `json:"status,omitempty"`
}

// EffectiveWorkspaceID returns spec.workspaceID, or the Tenant's name when
// it is unset.
func (t *Tenant) EffectiveWorkspaceID() string {
	if t.Spec.WorkspaceID != "" {
		return t.Spec.WorkspaceID
	}
	return t.Name
}

// PoolKey returns the namespace and name of the BusPool spec.pool names
// (its namespace defaults to the Tenant's); ok is false without spec.pool.
func (t *Tenant) PoolKey() (namespace, name string, ok bool) {
	if t.Spec.Pool == nil {
		return "", "", false
	}
	namespace = t.Spec.Pool.Namespace
	if namespace == "" {
		namespace = t.Namespace
	}
	return namespace, t.Spec.Pool.Name, true
}

// EffectiveReplicas returns spec.replicas, 1 when unset.
func (t *Tenant) EffectiveReplicas() int32 {
	if t.Spec.Replicas == nil {
		return 1
	}
	return *t.Spec.Replicas
}

// EffectiveDeletionPolicy returns spec.deletionPolicy, retain when unset.
func (t *Tenant) EffectiveDeletionPolicy() DeletionPolicy {
	if t.Spec.DeletionPolicy == "" {
		return DeletionPolicyRetain
	}
	return t.Spec.DeletionPolicy
}

// +kubebuilder:object:root=true

// TenantList is a list of Tenants.
type TenantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Tenants.
	Items []Tenant `json:"items"`
}

// TenantCapacity bounds a workspace's share of one bus pod and of its
// store. Past a bound of the pod a publish is answered 503 with
// Retry-After at once, never queued; past the topic's, 507.
type TenantCapacity struct {
	// PolicyConcurrency is the evaluations of spec.policies that may run
	// at once; past it 503 policy.busy. Default: half the pod's cores, at
	// least 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	PolicyConcurrency int32 `json:"policyConcurrency,omitempty"`
	// RequestConcurrency is the publish requests past authentication at
	// once (their bodies, policy evaluations and store operations); past
	// it 503 workspace.busy. Default: the bus's --request-concurrency (64).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	RequestConcurrency int32 `json:"requestConcurrency,omitempty"`
	// Topic bounds the workspace's topic on its store (the embedded one or
	// the external cluster, a pool's included): past it a publish is
	// refused 507 workspace.storage_full, and no message it accepted is
	// dropped. Unset: the store's own limits.
	// +optional
	Topic *TopicCapacity `json:"topic,omitempty"`
}

// TopicCapacity bounds a workspace's topic stream. The stream discards new
// messages at a bound, never old ones: a message accepted stays until the
// topic's retention ends, and a bound lowered under what the topic holds
// refuses publishes until retention brings it under.
//
// +kubebuilder:validation:XValidation:rule="!has(self.maxBytes) || (quantity(string(self.maxBytes)).compareTo(quantity('1Mi')) >= 0 && quantity(string(self.maxBytes)).compareTo(quantity('1Pi')) <= 0)",message="maxBytes must be between 1Mi and 1Pi"
type TopicCapacity struct {
	// MaxBytes is the most the topic holds, as JetStream counts a stream's
	// bytes (each message's subject, headers and body, and a few bytes
	// more), from 1Mi to 1Pi.
	// +optional
	MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`
	// MaxMessages is the most messages the topic holds, from 1 to a
	// trillion.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000000
	// +optional
	MaxMessages int64 `json:"maxMessages,omitempty"`
	// MaxAge is how long the topic keeps a message, at least the Tenant's
	// idempotencyWindow (168h by default). Unset, the topic keeps every
	// message up to its bounds. Story heads live in the topic: a story
	// whose latest snapshot has aged out counts as a new story.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('168h')",message="maxAge must be at least 168h"
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}
