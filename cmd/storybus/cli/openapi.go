package cli

import (
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/docs"
)

// newOpenAPICommand prints the API's OpenAPI 3.1 description, the one the
// binary embeds and the operations port serves.
func newOpenAPICommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "openapi",
		Short: "Print the OpenAPI 3.1 description of the publish and operations ports",
		Long: `Print the OpenAPI 3.1 description of the bus's HTTP API (docs/openapi.yaml)
on standard output. It refers to the SOM 1.0 JSON schemas beside it, under
som/; with --dir, write openapi.yaml and som/*.json into that directory
instead, so that a client generator can resolve them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				_, err := cmd.OutOrStdout().Write(docs.OpenAPI())
				return err
			}
			return writeOpenAPI(dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "write openapi.yaml and som/*.json into this directory (created if needed)")
	return cmd
}

// writeOpenAPI copies the embedded description and its schemas into dir.
func writeOpenAPI(dir string) error {
	return fs.WalkDir(docs.Files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := fs.ReadFile(docs.Files(), path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}
