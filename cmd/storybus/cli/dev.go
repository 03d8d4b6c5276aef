package cli

import (
	"fmt"
	"io"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/bus/config"
	"github.com/storybus/storybus/config/samples"
)

func newDevCommand() *cobra.Command {
	o := &ServeOptions{}
	var configFile string
	cmd := &cobra.Command{
		Use:   "dev",
		Args:  cobra.NoArgs,
		Short: "Serve the sample workspace on localhost with embedded JetStream, nothing to install",
		Long: "dev serves the sample workspace \"newsroom\" (connections cms and wire, with public development\n" +
			"secrets) on 127.0.0.1:8080 with an embedded JetStream in a fresh temporary directory, and prints\n" +
			"a curl pair that gets a token and publishes a sample story.context.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			cfg, err := config.Parse(samples.Workspace)
			if err != nil {
				return fmt.Errorf("sample workspace: %w", err)
			}
			if configFile != "" {
				if cfg, err = config.Load(configFile); err != nil {
					return err
				}
				o.watch = []string{configFile}
			}
			if o.DataDir == "" {
				dir, err := os.MkdirTemp("", "storybus-dev-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				o.DataDir = dir
			}
			out := cmd.OutOrStdout()
			return Serve(cmd.Context(), *o, []*config.Workspace{cfg}, newLogger(cmd.ErrOrStderr(), o.LogFormat),
				func(api, ops net.Addr) {
					if configFile != "" {
						fmt.Fprintf(out, "storybus dev: workspace %q from %s on http://%s (operations on http://%s), reloaded on change\n", cfg.ID, configFile, api, ops)
						return
					}
					printDevBanner(out, api, ops)
				})
		},
	}
	o.bind(cmd)
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "serve this workspace configuration file instead of the sample, reloading it on change")
	_ = f.Set("listen", "127.0.0.1:8080")
	_ = f.Set("ops-listen", "127.0.0.1:8081")
	_ = f.Set("data-dir", "")
	_ = f.Set("log-format", "text")
	f.Lookup("listen").DefValue = "127.0.0.1:8080"
	f.Lookup("ops-listen").DefValue = "127.0.0.1:8081"
	f.Lookup("data-dir").DefValue = "a fresh temporary directory"
	f.Lookup("log-format").DefValue = "text"
	return cmd
}

// printDevBanner prints working credentials and a curl pair that publishes
// the sample message: 202 the first time, 200 duplicate after.
func printDevBanner(w io.Writer, api, ops net.Addr) {
	base := "http://" + api.String()
	fmt.Fprintf(w, `storybus dev: workspace %q on %s (operations on http://%s)
connections: %s / %s and %s / %s (development secrets, public)

Get a token and publish a sample story.context (paste again for 200 duplicate):

TOKEN=$(curl -s -u %s:%s -X POST %s/v1/tenants/%s/tokens | sed -E 's/.*"access_token":"([^"]+)".*/\1/')
curl -s -X POST %s/v1/tenants/%s/messages -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '%s'

`, samples.WorkspaceID, base, ops.String(),
		samples.CMSClientID, samples.CMSSecret, samples.WireClientID, samples.WireSecret,
		samples.CMSClientID, samples.CMSSecret, base, samples.WorkspaceID,
		base, samples.WorkspaceID, samples.MessageSample)
}
