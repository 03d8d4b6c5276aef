// Package docs holds the machine-readable description of the bus's HTTP
// API, embedded in the binary: openapi.yaml (OpenAPI 3.1) and the SOM 1.0
// JSON schemas under som/ that it refers to. `storybus openapi` prints it
// and the operations port serves it; the bus's tests validate every answer
// they get against it.
package docs

import (
	"embed"
	"io/fs"
)

// OpenAPIFile is the description's file name, beside the som/ folder its
// references are relative to.
const OpenAPIFile = "openapi.yaml"

//go:embed openapi.yaml som/*.json
var files embed.FS

// OpenAPI returns the OpenAPI 3.1 description of the publish port and the
// operations port.
func OpenAPI() []byte {
	b, err := files.ReadFile(OpenAPIFile)
	if err != nil {
		panic("docs: " + OpenAPIFile + " is not embedded: " + err.Error())
	}
	return b
}

// Files returns openapi.yaml and som/*.json as they lie beside each other,
// so that the description's relative references resolve within it.
func Files() fs.FS { return files }
