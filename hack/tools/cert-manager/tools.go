//go:build tools

// Package tools pins cert-manager in this module so that the operator's
// tests install the CustomResourceDefinitions of the cert-manager release
// named in go.mod (its deploy/crds) into envtest, without the operator
// itself depending on cert-manager's Go packages.
package tools

import _ "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
