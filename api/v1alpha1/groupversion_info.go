// Package v1alpha1 holds the storybus custom resources of API group
// bus.storybus.io, version v1alpha1: Tenant, Connection, Grant and
// OwnershipPolicy. Platform teams declare them; the operator compiles each
// Tenant with its Connections, Grants and OwnershipPolicies into the
// workspace configuration its bus pods serve.
//
// +kubebuilder:object:generate=true
// +groupName=bus.storybus.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "bus.storybus.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
