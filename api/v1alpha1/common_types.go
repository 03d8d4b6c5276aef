package v1alpha1

// LocalObjectReference names an object of a known kind in the referrer's
// namespace.
type LocalObjectReference struct {
	// Name of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// SecretKeyReference names one key of a Secret in the referrer's namespace.
type SecretKeyReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Key in the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// Limits are a rate limit and a daily quota. Zero or unset means unlimited.
type Limits struct {
	// RatePerSecond is the sustained number of requests per second.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RatePerSecond int32 `json:"ratePerSecond,omitempty"`
	// Burst is how many requests may arrive at once above the rate.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Burst int32 `json:"burst,omitempty"`
	// DailyQuota is the number of accepted messages per UTC day.
	// +kubebuilder:validation:Minimum=0
	// +optional
	DailyQuota int64 `json:"dailyQuota,omitempty"`
}

// Condition types. Every kind has Ready, the summary: True only when
// everything the object asks for is in force (for a Tenant: its bus is
// serving every desired replica).
const (
	// ConditionReady summarises the other conditions.
	ConditionReady = "Ready"
	// ConditionResolvedRefs is True when every object the spec references
	// exists (Connection, Grant, OwnershipPolicy).
	ConditionResolvedRefs = "ResolvedRefs"
	// ConditionAccepted is True when the spec passed the checks the API
	// server's validation cannot do (OwnershipPolicy patterns).
	ConditionAccepted = "Accepted"
	// ConditionConfigurationValid is True when the Tenant's workspace
	// configuration compiled and was written to its ConfigMap.
	ConditionConfigurationValid = "ConfigurationValid"
	// ConditionAvailable is True when every desired bus replica of a Tenant
	// is ready.
	ConditionAvailable = "Available"
	// ConditionCredentialsReady is True when a Connection's credentials
	// Secret holds a client id and secret.
	ConditionCredentialsReady = "CredentialsReady"
	// ConditionConfigurationLoaded is True when every ready bus pod of a
	// Tenant reports, on its operations port, that it serves the
	// configuration compiled into the Tenant's ConfigMap.
	ConditionConfigurationLoaded = "ConfigurationLoaded"
	// ConditionInForce is True when a Connection, Grant or OwnershipPolicy,
	// at its current generation, is part of the configuration its Tenant's
	// bus pods have loaded: only then does the bus act on it.
	ConditionInForce = "InForce"
)

// Condition reasons. A reason is a CamelCase word a script can match on; the
// condition's message says the details.
const (
	// ReasonReady: everything is in force.
	ReasonReady = "Ready"
	// ReasonReconciling: the operator has not yet observed enough to decide.
	ReasonReconciling = "Reconciling"
	// ReasonResolved: every referenced object exists.
	ReasonResolved = "Resolved"
	// ReasonTenantNotFound: spec.tenantRef (or the Tenant of the referenced
	// Connection) names no Tenant in the namespace.
	ReasonTenantNotFound = "TenantNotFound"
	// ReasonConnectionNotFound: spec.connectionRef names no Connection in the
	// namespace.
	ReasonConnectionNotFound = "ConnectionNotFound"
	// ReasonTenantDeleting: the referenced Tenant is being deleted.
	ReasonTenantDeleting = "TenantDeleting"
	// ReasonAccepted: the spec passed validation.
	ReasonAccepted = "Accepted"
	// ReasonInvalidSpec: the spec is invalid in a way only the operator can
	// check; the message says what to fix.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonCompiled: the workspace configuration compiled and is written.
	ReasonCompiled = "Compiled"
	// ReasonInvalidConfiguration: the Tenant with its Connections, Grants and
	// OwnershipPolicies does not compile into a valid workspace
	// configuration. The bus keeps serving the last valid one.
	ReasonInvalidConfiguration = "InvalidConfiguration"
	// ReasonNameConflict: an object the operator would create already exists
	// and is not controlled by this resource. The operator never adopts it.
	ReasonNameConflict = "NameConflict"
	// ReasonWorkspaceConflict: another Tenant holds the same workspace id
	// on the same external NATS cluster, whose streams and buckets are
	// named by workspace id. This Tenant gets no bus on that cluster.
	ReasonWorkspaceConflict = "WorkspaceConflict"
	// ReasonReplicasReady: every desired replica is ready.
	ReasonReplicasReady = "ReplicasReady"
	// ReasonReplicasNotReady: fewer replicas are ready than desired.
	ReasonReplicasNotReady = "ReplicasNotReady"
	// ReasonScaledToZero: spec.replicas is 0, so nothing serves.
	ReasonScaledToZero = "ScaledToZero"
	// ReasonAwaitingConfiguration: the Tenant has never had a valid
	// configuration, so the operator has not created its bus.
	ReasonAwaitingConfiguration = "AwaitingConfiguration"
	// ReasonConfigurationLoaded: every ready bus pod serves the compiled
	// configuration; for a dependent object, the configuration its bus
	// pods serve contains it.
	ReasonConfigurationLoaded = "ConfigurationLoaded"
	// ReasonConfigurationNotLoaded: a ready bus pod serves another
	// configuration than the compiled one (it has not reloaded yet, or
	// could not be asked), or no bus pod is ready to serve it.
	ReasonConfigurationNotLoaded = "ConfigurationNotLoaded"
	// ReasonTenantConfigurationInvalid: the object is not in force because
	// its Tenant's configuration does not compile (the Tenant's
	// ConfigurationValid message says why); the bus serves the last valid
	// configuration, without this object's current generation.
	ReasonTenantConfigurationInvalid = "TenantConfigurationInvalid"
	// ReasonNotCompiled: the Tenant's configuration has not yet been
	// compiled with the object's current generation.
	ReasonNotCompiled = "NotCompiled"
	// ReasonTenantNotServing: the object is compiled but its Tenant's bus
	// pods do not serve that configuration yet (the Tenant's Ready message
	// says why).
	ReasonTenantNotServing = "TenantNotServing"
	// ReasonCredentialsGenerated: the operator generated the credentials
	// Secret.
	ReasonCredentialsGenerated = "CredentialsGenerated"
	// ReasonCredentialsReused: an existing Secret named by
	// spec.credentials.secretName holds the credentials.
	ReasonCredentialsReused = "CredentialsReused"
	// ReasonCredentialsRotated: the client secret was replaced on request.
	ReasonCredentialsRotated = "CredentialsRotated"
	// ReasonCredentialsChanged: the client secret in the credentials
	// Secret was changed outside a rotation (by hand, or by re-applying a
	// manifest). The operator treats it as a rotation: tokens issued before
	// it are revoked.
	ReasonCredentialsChanged = "CredentialsChanged"
	// ReasonSecretReleased: a credentials Secret the operator generated was
	// then applied by a user (it carries kubectl's last-applied
	// configuration). The operator removes its owner reference: a Secret a
	// user supplies is never owned, nor deleted, by the operator.
	ReasonSecretReleased = "SecretReleased"
	// ReasonSecretInUse: the named Secret is controlled by another object.
	ReasonSecretInUse = "SecretInUse"
	// ReasonSecretNotFound: a Secret the spec references (an IAM access key)
	// does not exist or lacks a key.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSecretTooShort: the client secret in the credentials Secret is
	// under 32 bytes, and the bus refuses it.
	ReasonSecretTooShort = "SecretTooShort"
)

// Finalizer is the finalizer the operator puts on Tenants so that it can
// apply spec.deletionPolicy before they go.
const Finalizer = "bus.storybus.io/finalizer"

// Annotations the operator reads or writes.
const (
	// AnnotationRotate on a Connection requests a credentials rotation each
	// time its value changes (for example a timestamp).
	AnnotationRotate = "bus.storybus.io/rotate"
	// AnnotationConfigHash on the Tenant's ConfigMap holds the hash of the
	// workspace configuration in it (the Tenant's status.configHash).
	AnnotationConfigHash = "bus.storybus.io/config-hash"
	// AnnotationRotationHandled on a credentials Secret records the last
	// rotation request acted on, "<spec.credentials.rotate>/<rotate
	// annotation>". The Secret is the record, so a rotation is never
	// repeated or lost when a status write fails.
	AnnotationRotationHandled = "bus.storybus.io/rotation-handled"
	// AnnotationRotatedAt on a credentials Secret is when the operator last
	// generated its client secret (RFC 3339); it becomes the Connection's
	// status.credentialsRotatedAt.
	AnnotationRotatedAt = "bus.storybus.io/rotated-at"
	// AnnotationSecretHash on a credentials Secret is the hash of the
	// client secret the operator last saw in it (the form of the
	// configuration's secretHash). A Secret whose client secret no longer
	// matches was changed outside a rotation.
	AnnotationSecretHash = "bus.storybus.io/secret-hash"
)
