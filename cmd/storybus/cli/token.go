package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/client"
)

// Environment variables the producer and consumer commands read when the
// flag is not given (readEnv). The secret is better passed this way than
// as a flag, which other users of the machine can see.
const (
	EnvURL          = EnvPrefix + "URL"
	EnvWorkspace    = EnvPrefix + "WORKSPACE"
	EnvClientID     = EnvPrefix + "CLIENT_ID"
	EnvClientSecret = EnvPrefix + "CLIENT_SECRET"
	EnvOutbox       = EnvPrefix + "OUTBOX"
	EnvCAFile       = EnvPrefix + "CA_FILE"
)

// ConnectionOptions say which bus, workspace and connection a producer or
// consumer command talks as.
type ConnectionOptions struct {
	URL          string
	Workspace    string
	ClientID     string
	ClientSecret string
	// TLS names the CA file the bus's certificate is checked against and
	// the client certificate of mutual TLS.
	TLS client.TLSFiles
	// http is the client the commands send with, built by validate.
	http *http.Client
}

func (o *ConnectionOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.URL, "url", "http://127.0.0.1:8080", "base URL of the bus")
	f.StringVar(&o.Workspace, "workspace", "", "workspace id")
	f.StringVar(&o.ClientID, "client-id", "", "the connection's client id")
	f.StringVar(&o.ClientSecret, "client-secret", "", "the connection's client secret; the environment is safer, other users of the machine can see a flag")
	f.StringVar(&o.TLS.CAFile, "ca-file", "", "PEM CA certificates the bus's certificate is checked against instead of the system's (which honour SSL_CERT_FILE)")
	f.StringVar(&o.TLS.CertFile, "cert-file", "", "PEM client certificate, for a bus that takes mutual TLS")
	f.StringVar(&o.TLS.KeyFile, "key-file", "", "PEM private key of --cert-file")
	readEnv(cmd, "url", "workspace", "client-id", "client-secret", "ca-file")
}

// tokenExitCodesHelp ends `storybus token --help`: a token request has no
// message to refuse, keep or resend.
const tokenExitCodesHelp = `Exit codes: 0 the token is printed; 1 error; 2 usage; 3 the token request is refused (400:
a bug); 4 not allowed (401 invalid_client: the client id or secret; 400 unauthorized_client: an
inactive connection; the bus's certificate not trusted): configuration; 5 no answer, 429 (locked
out after failed attempts) or 5xx: try again later.`

// validate checks that every setting is there, and builds the HTTP client.
// Each missing setting is named once, with the ways to give it.
func (o *ConnectionOptions) validate() error {
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"--url (or " + EnvURL + ")", o.URL},
		{"--workspace (or " + EnvWorkspace + ")", o.Workspace},
		{"--client-id (or " + EnvClientID + ")", o.ClientID},
		{"the client secret: --client-secret (or " + EnvClientSecret + "), or a client certificate with --cert-file", o.ClientSecret + o.TLS.CertFile},
	} {
		if f.value == "" {
			missing = append(missing, "missing "+f.name)
		}
	}
	if len(missing) > 0 {
		return usageError{errors.New(strings.Join(missing, "; "))}
	}
	hc, err := client.NewHTTPClient(o.TLS, 0)
	if err != nil {
		return usageError{err}
	}
	o.http = hc
	return nil
}

func (o *ConnectionOptions) tokens() *client.ClientCredentials {
	// The token endpoint answers at once; bound it as the client's
	// default does.
	hc := *o.http
	hc.Timeout = 30 * time.Second
	return &client.ClientCredentials{URL: o.URL, Workspace: o.Workspace, ClientID: o.ClientID, ClientSecret: o.ClientSecret, HTTPClient: &hc}
}

func newTokenCommand() *cobra.Command {
	o := &ConnectionOptions{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Get a bearer token for a connection and print it",
		Long: "token asks the workspace's token endpoint for a bearer token with the connection's client id and\n" +
			"secret, and prints it on one line (TOKEN=$(storybus token …)), or the whole answer with --json.\n\n" +
			tokenExitCodesHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			tr, err := o.tokens().Fetch(cmd.Context())
			if err != nil {
				return classify(err)
			}
			if asJSON {
				b, err := json.Marshal(tr)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tr.AccessToken)
			return err
		},
	}
	o.bind(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the token endpoint's whole answer as JSON")
	return cmd
}

// classify gives a client error its exit code.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ex exitError
	if errors.As(err, &ex) {
		return err
	}
	return exitError{code: exitCode(err), err: err}
}
