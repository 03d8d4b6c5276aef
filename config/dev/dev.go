// Package dev embeds the workspace configuration that `storybus dev`
// serves: workspace "newsroom" with the connections "cms" and "wire" and
// the public development secrets of package samples. It is the bus's own
// file format, not a Kubernetes object: the custom resources of
// config/samples compile to it.
package dev

import _ "embed"

// Workspace is the development workspace configuration
// (workspace-newsroom.yaml).
//
//go:embed workspace-newsroom.yaml
var Workspace []byte
