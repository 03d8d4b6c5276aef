package v1alpha1

// TenantTLS has the bus serve HTTPS on its publish port with a key pair
// from a Secret: one the platform provides (SecretName), or one cert-manager
// issues for a Certificate the operator writes (IssuerRef). The bus pods
// mount the Secret and reload a renewed pair without a restart.
//
// +kubebuilder:validation:XValidation:rule="has(self.secretName) != has(self.issuerRef)",message="set exactly one of secretName and issuerRef"
// +kubebuilder:validation:XValidation:rule="!has(self.dnsNames) || has(self.issuerRef)",message="dnsNames go with issuerRef: a provided Secret's certificate is taken as it is"
type TenantTLS struct {
	// SecretName names a kubernetes.io/tls Secret in the Tenant's
	// namespace holding tls.crt and tls.key.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// IssuerRef names the cert-manager Issuer or ClusterIssuer that signs
	// the Certificate the operator writes for the Tenant. Its Secret is
	// <tenant>-tls.
	// +optional
	IssuerRef *IssuerReference `json:"issuerRef,omitempty"`
	// DNSNames are names the certificate covers besides the bus Service's
	// own in-cluster names (the host names producers outside the cluster
	// use); on a pool, where the Tenant has no Service of its own, the
	// only names besides spec.expose's. Only with IssuerRef: a provided
	// Secret is taken as it is.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	DNSNames []string `json:"dnsNames,omitempty"`
}

// IssuerReference names a cert-manager issuer.
type IssuerReference struct {
	// Name of the issuer.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Kind is Issuer (in the Tenant's namespace, the default) or
	// ClusterIssuer.
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	// +kubebuilder:default=Issuer
	// +optional
	Kind string `json:"kind,omitempty"`
	// Group of the issuer's kind; cert-manager.io unless an external
	// issuer is used.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:default=cert-manager.io
	// +optional
	Group string `json:"group,omitempty"`
}

// ConditionCertificateReady is a Tenant's condition while spec.tls is set:
// True when the bus's key pair is there and valid, with its expiry in the
// message; False with one of the reasons below otherwise. Absent without
// spec.tls. It does not count towards Ready: a bus whose Secret is missing
// has no pods, which Available reports.
const ConditionCertificateReady = "CertificateReady"

// Reasons of ConditionCertificateReady.
const (
	// ReasonCertificateIssued: the key pair is in its Secret and valid
	// until the time the message gives.
	ReasonCertificateIssued = "CertificateIssued"
	// ReasonCertificateNotReady: cert-manager has not (yet) issued the
	// Certificate; the message has cert-manager's reason.
	ReasonCertificateNotReady = "CertificateNotReady"
	// ReasonCertManagerNotInstalled: spec.tls.issuerRef is set but the
	// cert-manager CustomResourceDefinitions are not installed.
	ReasonCertManagerNotInstalled = "CertManagerNotInstalled"
	// ReasonTLSSecretInvalid: the Secret of spec.tls.secretName is missing
	// or holds no usable certificate.
	ReasonTLSSecretInvalid = "TLSSecretInvalid"
	// ReasonCertificateExpired: the certificate's notAfter has passed.
	ReasonCertificateExpired = "CertificateExpired"
)
