package samples

import "embed"

// Manifests holds the sample custom resources (bus_v1alpha1_*.yaml: the
// Tenant newsroom, the Connections cms and wire, their Grants and an
// OwnershipPolicy) and the Secrets with the connections' development
// credentials (credentials.yaml), with the kustomization.yaml that applies
// them in order. Compiled by the operator, they give the workspace of
// config/dev/workspace-newsroom.yaml.
//
//go:embed bus_v1alpha1_*.yaml credentials.yaml kustomization.yaml
var Manifests embed.FS

// ManifestFiles are the files of Manifests in the order to apply them
// (the order of kustomization.yaml): Secrets first, so that the operator
// never generates a Secret a user means to supply, then the Tenant before
// the objects that refer to it.
var ManifestFiles = []string{
	"credentials.yaml",
	"bus_v1alpha1_tenant.yaml",
	"bus_v1alpha1_connection.yaml",
	"bus_v1alpha1_grant.yaml",
	"bus_v1alpha1_ownershippolicy.yaml",
}
