package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/internal/buildinfo"
)

// versionTemplate makes --version print what `storybus version` prints.
const versionTemplate = "{{.Version}}\n"

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit and the Go version of this storybus",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), buildinfo.Get())
			return err
		},
	}
}
