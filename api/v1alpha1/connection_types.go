package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Keys of a Connection's credentials Secret.
const (
	// CredentialsClientIDKey holds the OAuth2 client id.
	CredentialsClientIDKey = "clientID"
	// CredentialsClientSecretKey holds the client secret.
	CredentialsClientSecretKey = "clientSecret"
)

// Keys of an IAM access key Secret (spec.iam.accessKeySecretRef).
const (
	// IAMAccessKeyIDKey holds the AWS access key id.
	IAMAccessKeyIDKey = "accessKeyID"
	// IAMSecretAccessKeyKey holds the AWS secret access key.
	IAMSecretAccessKeyKey = "secretAccessKey"
)

// ConnectionSpec is one producer or consumer system of a Tenant.
type ConnectionSpec struct {
	// TenantRef names the Tenant, in the same namespace, whose workspace the
	// connection belongs to. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="tenantRef is immutable"
	// +required
	TenantRef LocalObjectReference `json:"tenantRef"`

	// Active, when false, refuses everything the connection sends with 403
	// connection.inactive, including its token requests.
	// +kubebuilder:default=true
	// +optional
	Active *bool `json:"active,omitempty"`

	// Credentials say where the client id and secret are kept and when to
	// rotate them.
	// +optional
	Credentials ConnectionCredentials `json:"credentials,omitempty"`

	// Limits override the Tenant's default rate limit and daily quota.
	// +optional
	Limits *Limits `json:"limits,omitempty"`

	// IAM binds AWS access keys to the connection for the SigV4 routes.
	// +optional
	IAM *ConnectionIAM `json:"iam,omitempty"`
}

// ConnectionCredentials locate a Connection's credentials Secret and request
// rotations.
type ConnectionCredentials struct {
	// SecretName is the Secret holding the keys clientID and clientSecret.
	// Default: "<connection name>-credentials". When the Secret exists it is
	// used as it is (missing keys are filled in); otherwise the operator
	// creates it with a random 32-byte secret and owns it.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// Rotate requests a new client secret each time it is increased. Every
	// token issued before the rotation is then refused (401
	// auth.token.revoked).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="rotate can only be increased"
	// +optional
	Rotate int64 `json:"rotate,omitempty"`
}

// ConnectionIAM binds an AWS access key to a Connection.
type ConnectionIAM struct {
	// AccessKeySecretRef names a Secret with the keys accessKeyID and
	// secretAccessKey.
	// +required
	AccessKeySecretRef LocalObjectReference `json:"accessKeySecretRef"`
	// RoleARN is the IAM role the producer signs as.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$`
	// +optional
	RoleARN string `json:"roleARN,omitempty"`
	// Verified is set by a workspace admin once the role is verified; until
	// then the SigV4 routes refuse the connection with iam.role.unverified.
	// +optional
	Verified bool `json:"verified,omitempty"`
}

// ConnectionStatus is what the operator observed of a Connection.
type ConnectionStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the summary), ResolvedRefs, CredentialsReady.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ClientID is the OAuth2 client id in the credentials Secret.
	// +optional
	ClientID string `json:"clientID,omitempty"`
	// SecretName is the credentials Secret in use.
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// CredentialsRotatedAt is when the operator last generated the client
	// secret; tokens issued before it are revoked.
	// +optional
	CredentialsRotatedAt *metav1.Time `json:"credentialsRotatedAt,omitempty"`
	// ObservedRotate is the spec.credentials.rotate last acted on.
	// +optional
	ObservedRotate int64 `json:"observedRotate,omitempty"`
}

// Connection is a producer or consumer system allowed into a Tenant's
// workspace, with its generated credentials.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=storybus,shortName=sbc
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.tenantRef.name`,description="The Tenant whose workspace the connection belongs to"
// +kubebuilder:printcolumn:name="Client ID",type=string,JSONPath=`.status.clientID`,description="The client id of its credentials"
// +kubebuilder:printcolumn:name="Active",type=boolean,JSONPath=`.spec.active`,description="False refuses everything it sends with connection.inactive"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="True when its credentials exist and it is in force in its Tenant's bus"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Why Ready is what it is; the condition's message says more"
// +kubebuilder:printcolumn:name="Rotated",type=date,JSONPath=`.status.credentialsRotatedAt`,priority=1,description="When the client secret was last generated"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`,description="Time since the Connection was created"
type Connection struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired connection.
	// +required
	Spec ConnectionSpec `json:"spec"`
	// Status is what the operator observed.
	// +optional
	Status ConnectionStatus `json:"status,omitempty"`
}

// CredentialsSecretSuffix ends the name of a Connection's credentials
// Secret when spec.credentials.secretName is unset.
const CredentialsSecretSuffix = "-credentials"

// CredentialsSecretName returns spec.credentials.secretName, or
// "<name>-credentials" when it is unset.
func (c *Connection) CredentialsSecretName() string {
	if c.Spec.Credentials.SecretName != "" {
		return c.Spec.Credentials.SecretName
	}
	return c.Name + CredentialsSecretSuffix
}

// IsActive reports whether the connection may publish (spec.active, true
// when unset).
func (c *Connection) IsActive() bool { return c.Spec.Active == nil || *c.Spec.Active }

// +kubebuilder:object:root=true

// ConnectionList is a list of Connections.
type ConnectionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Connections.
	Items []Connection `json:"items"`
}
