//go:build tools

// Package tools pins controller-gen in this module so that
// `go build sigs.k8s.io/controller-tools/cmd/controller-gen` resolves from
// go.mod/go.sum and never touches the root module.
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
