//go:build tools

// Package tools pins the Prometheus Operator in this module so that the
// operator's tests install the CustomResourceDefinitions of the release
// named in go.mod (its example/prometheus-operator-crd) into envtest,
// without the operator itself depending on the Prometheus Operator's Go
// packages. The import only keeps the requirement: versionutil is the
// root module's package with the fewest dependencies.
package tools

import _ "github.com/prometheus-operator/prometheus-operator/pkg/versionutil"
