package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/configfile"
	"github.com/storybus/storybus/config/dev"
	"github.com/storybus/storybus/config/samples"
	"github.com/storybus/storybus/internal/certgen"
)

func newDevCommand() *cobra.Command {
	o := &ServeOptions{}
	var configFile string
	var devTLS bool
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
			cfg, err := config.Parse(dev.Workspace)
			if err != nil {
				return fmt.Errorf("sample workspace: %w", err)
			}
			if configFile != "" {
				f, err := configfile.Open(configFile)
				if err != nil {
					return err
				}
				cfg = f.Workspace
				o.watch = []*configfile.File{f}
			}
			if o.DataDir == "" {
				dir, err := os.MkdirTemp("", "storybus-dev-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				o.DataDir = dir
			}
			caFile := ""
			if devTLS && o.TLSCertFile == "" {
				dir, err := os.MkdirTemp("", "storybus-dev-tls-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				if caFile, err = writeDevCertificates(dir, o); err != nil {
					return err
				}
			}
			scheme := "http"
			if o.TLSCertFile != "" {
				scheme = "https"
			}
			out := cmd.OutOrStdout()
			o.ReleaseStartPages = true
			return Serve(cmd.Context(), *o, []*config.Workspace{cfg}, slog.New(newLogHandler(cmd.ErrOrStderr(), o.LogFormat, o.LogLevel)),
				func(api, ops net.Addr) {
					if configFile != "" {
						fmt.Fprintf(out, "storybus dev: workspace %q from %s on %s://%s (operations on http://%s), reloaded on change\n", cfg.ID, configFile, scheme, api, ops)
						if caFile != "" {
							fmt.Fprintf(out, "CA certificate: %s\n", caFile)
						}
						return
					}
					printDevBanner(out, scheme, caFile, api, ops)
				})
		},
	}
	o.bind(cmd)
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "serve this workspace configuration file instead of the sample, reloading it on change")
	f.BoolVar(&devTLS, "tls", false, "serve HTTPS with a throwaway CA and certificate made in a temporary directory (ignored with --tls-cert-file)")
	_ = f.Set("listen", "127.0.0.1:8080")
	_ = f.Set("ops-listen", "127.0.0.1:8081")
	_ = f.Set("data-dir", "")
	_ = f.Set("log-format", "text")
	// One process on a laptop: nothing to drain from.
	_ = f.Set("drain-period", "0s")
	f.Lookup("drain-period").DefValue = "0s"
	f.Lookup("listen").DefValue = "127.0.0.1:8080"
	f.Lookup("ops-listen").DefValue = "127.0.0.1:8081"
	f.Lookup("data-dir").DefValue = "a fresh temporary directory"
	f.Lookup("log-format").DefValue = "text"
	return cmd
}

// printDevBanner prints working credentials and a curl pair that publishes
// the sample message: 202 the first time, 200 duplicate after. With
// caFile, the pair trusts it.
func printDevBanner(w io.Writer, scheme, caFile string, api, ops net.Addr) {
	base := scheme + "://" + api.String()
	curl := "curl -s"
	if caFile != "" {
		curl += " --cacert " + caFile
	}
	fmt.Fprintf(w, `storybus dev: workspace %q on %s (operations on http://%s)
connections: %s / %s and %s / %s (development secrets, public)
`, samples.WorkspaceID, base, ops.String(),
		samples.CMSClientID, samples.CMSSecret, samples.WireClientID, samples.WireSecret)
	if caFile != "" {
		fmt.Fprintf(w, `CA certificate: %s
(a throwaway CA, deleted when dev exits: curl --cacert, storybus --ca-file or SSL_CERT_FILE)
`, caFile)
	}
	fmt.Fprintf(w, `
Get a token and publish a sample story.context (paste again for 200 duplicate):

TOKEN=$(%s -u %s:%s -d grant_type=client_credentials %s/v1/tenants/%s/tokens | sed -E 's/.*"access_token":"([^"]+)".*/\1/')
%s -X POST %s/v1/tenants/%s/messages -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '%s'

`, curl, samples.CMSClientID, samples.CMSSecret, base, samples.WorkspaceID,
		curl, base, samples.WorkspaceID, samples.MessageSample)
}

// writeDevCertificates makes a throwaway CA and a certificate for the
// listen address and localhost in dir, points o's TLS flags at them, and
// returns the CA file's path.
func writeDevCertificates(dir string, o *ServeOptions) (string, error) {
	ca, err := certgen.NewCA("storybus dev CA")
	if err != nil {
		return "", err
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if host, _, err := net.SplitHostPort(o.Listen); err == nil && host != "" && !slices.Contains(hosts, host) {
		hosts = append(hosts, host)
	}
	pair, err := ca.Sign(certgen.Leaf{CommonName: "storybus dev", Hosts: hosts})
	if err != nil {
		return "", err
	}
	files := map[string][]byte{"ca.crt": ca.CertPEM, "tls.crt": pair.CertPEM, "tls.key": pair.KeyPEM}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			return "", err
		}
	}
	o.TLSCertFile, o.TLSKeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	return filepath.Join(dir, "ca.crt"), nil
}
