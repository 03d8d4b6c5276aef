//go:build tools

// Package tools pins oapi-codegen, which make test-openapi-generators runs
// on docs/openapi.yaml, in a module of its own so that its dependencies
// never reach storybus's go.mod.
package tools

import _ "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen"
