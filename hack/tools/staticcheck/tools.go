//go:build tools

// Package tools pins staticcheck, the linter `make lint` runs, in a module
// of its own so that its dependencies never reach storybus's go.mod.
package tools

import _ "honnef.co/go/tools/cmd/staticcheck"
