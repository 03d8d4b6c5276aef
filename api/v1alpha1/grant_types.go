package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GrantSpec says what one Connection may publish and consume. Several Grants
// of one Connection add up.
//
// +kubebuilder:validation:XValidation:rule="has(self.publish) || has(self.consume)",message="a Grant grants publish, consume or both"
type GrantSpec struct {
	// ConnectionRef names the Connection, in the same namespace, the grant
	// is for.
	// +required
	ConnectionRef LocalObjectReference `json:"connectionRef"`
	// Publish lists the system_ids and message_types the connection may
	// publish.
	// +optional
	Publish *PublishGrant `json:"publish,omitempty"`
	// Consume lists the families the connection may read.
	// +optional
	Consume *ConsumeGrant `json:"consume,omitempty"`
}

// PublishGrant lists what a connection may publish. "*" grants all.
type PublishGrant struct {
	// SystemIDs are the system_ids the connection may publish as.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9][a-z0-9-]{1,62})$`
	// +listType=set
	// +optional
	SystemIDs []string `json:"systemIDs,omitempty"`
	// MessageTypes are the message_types the connection may publish.
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:Enum="*";story.context;story.event;asset.reference
	// +listType=set
	// +optional
	MessageTypes []string `json:"messageTypes,omitempty"`
}

// ConsumeGrant lists the families a connection may read. "*" grants all.
type ConsumeGrant struct {
	// Families are the SOM families the connection may read.
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:Enum="*";story-context;story-event;asset-reference
	// +listType=set
	// +optional
	Families []string `json:"families,omitempty"`
}

// GrantStatus is what the operator observed of a Grant.
type GrantStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the summary) and ResolvedRefs.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Tenant is the Tenant of the granted Connection, whose configuration
	// the grant is folded into.
	// +optional
	Tenant string `json:"tenant,omitempty"`
}

// Grant gives a Connection the right to publish some system_ids and
// message_types and to read some families.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=storybus,shortName=sbg
// +kubebuilder:printcolumn:name="Connection",type=string,JSONPath=`.spec.connectionRef.name`,description="The Connection granted"
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.status.tenant`,description="The Tenant of that Connection"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="True when the grant is in force in its Tenant's bus"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Why Ready is what it is; the condition's message says more"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`,description="Time since the Grant was created"
type Grant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired grant.
	// +required
	Spec GrantSpec `json:"spec"`
	// Status is what the operator observed.
	// +optional
	Status GrantStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// GrantList is a list of Grants.
type GrantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Grants.
	Items []Grant `json:"items"`
}
