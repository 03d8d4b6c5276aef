// Package v1alpha1 holds the storybus custom resources of API group
// bus.storybus.io, version v1alpha1: Tenant, Connection, Grant,
// OwnershipPolicy and BusPool. Platform teams declare them; the operator
// compiles each Tenant with its Connections, Grants and OwnershipPolicies
// into the workspace configuration its bus pods serve, on a bus of its own
// or on the BusPool it names.
//
// +kubebuilder:object:generate=true
// +groupName=bus.storybus.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "bus.storybus.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers the five kinds and their lists under GroupVersion.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Tenant{}, &TenantList{},
		&Connection{}, &ConnectionList{},
		&Grant{}, &GrantList{},
		&OwnershipPolicy{}, &OwnershipPolicyList{},
		&BusPool{}, &BusPoolList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
