package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NotOwner modes: what story.not_owner does.
const (
	// NotOwnerTolerate accepts a snapshot from a system that does not own
	// the story, with the warning story.not_owner.
	NotOwnerTolerate = "tolerate"
	// NotOwnerRefuse refuses it with 409 story.not_owner.
	NotOwnerRefuse = "refuse"
)

// OwnershipPolicySpec decides who owns a Tenant's stories and what happens
// when another system publishes a snapshot of one.
type OwnershipPolicySpec struct {
	// TenantRef names the Tenant, in the same namespace, the policy applies
	// to.
	// +required
	TenantRef LocalObjectReference `json:"tenantRef"`
	// NotOwner is tolerate (the default: story.not_owner is a warning) or
	// refuse (409). When several policies apply to a Tenant, refuse wins.
	// +kubebuilder:validation:Enum=tolerate;refuse
	// +kubebuilder:default=tolerate
	// +optional
	NotOwner string `json:"notOwner,omitempty"`
	// Owners assign stories to systems by story id pattern, ahead of the
	// first-snapshot rule. The first matching entry wins.
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	Owners []OwnerRule `json:"owners,omitempty"`
	// Handoffs hand single stories to another system; they win over
	// everything else.
	// +kubebuilder:validation:MaxItems=1024
	// +listType=atomic
	// +optional
	Handoffs []Handoff `json:"handoffs,omitempty"`
}

// OwnerRule assigns the stories whose story_id matches StoryIDPattern to
// SystemID.
type OwnerRule struct {
	// StoryIDPattern is a Go regular expression that must match the whole
	// story_id.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	StoryIDPattern string `json:"storyIDPattern"`
	// SystemID owns the matching stories.
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9-]{1,62}$`
	// +required
	SystemID string `json:"systemID"`
}

// Handoff hands one story to another system.
type Handoff struct {
	// StoryID is the story handed off.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._:-]{1,128}$`
	// +required
	StoryID string `json:"storyID"`
	// ToSystemID owns the story from now on.
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9-]{1,62}$`
	// +required
	ToSystemID string `json:"toSystemID"`
}

// OwnershipPolicyStatus is what the operator observed of an
// OwnershipPolicy.
type OwnershipPolicyStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the summary), ResolvedRefs and Accepted.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// OwnershipPolicy is a Tenant's story ownership policy.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=storybus,shortName=sbop
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.tenantRef.name`,description="The Tenant whose stories the policy governs"
// +kubebuilder:printcolumn:name="Not Owner",type=string,JSONPath=`.spec.notOwner`,description="What the workspace does with a message from a system that does not own its story"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="True when the policy is in force in its Tenant's bus"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Why Ready is what it is; the condition's message says more"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`,description="Time since the OwnershipPolicy was created"
type OwnershipPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired policy.
	// +required
	Spec OwnershipPolicySpec `json:"spec"`
	// Status is what the operator observed.
	// +optional
	Status OwnershipPolicyStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// OwnershipPolicyList is a list of OwnershipPolicies.
type OwnershipPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the OwnershipPolicies.
	Items []OwnershipPolicy `json:"items"`
}
