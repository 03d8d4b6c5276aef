//go:build tools

// Package tools pins helm's command in this module so that
// `go build helm.sh/helm/v3/cmd/helm` resolves from go.mod/go.sum.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
