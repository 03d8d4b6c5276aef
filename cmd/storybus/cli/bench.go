package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/bench"
	"github.com/storybus/storybus/client"
)

// benchFlags are the flags of `storybus bench` beyond bench.Options.
type benchFlags struct {
	jsonPath   string
	cpuProfile string
	phases     []string
	// The running bus of --url, and how to reach and authenticate to it.
	url, clientID, clientSecret, token, systemID string
	tls                                          client.TLSFiles
}

// embeddedOnly are the flags that mean nothing against a running bus.
var embeddedOnly = []string{"sync", "sync-interval", "data-dir", "phases", "nats-url", "cluster", "nats-server", "replicas", "workspaces", "bus-replicas"}

func newBenchCommand() *cobra.Command {
	o := bench.DefaultOptions()
	bf := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure publish throughput and latency: the bus against HTTP relays and raw JetStream, or a running bus",
		Long: "bench starts an embedded JetStream in a fresh temporary directory, the bus and a bare relay on\n" +
			"loopback ports with the same HTTP stack, then runs five phases in turn on the same store and\n" +
			"connection, each on fresh streams: the bus's HTTP publish API; the relay, which decodes\n" +
			"message_id and story_id and does one JetStream publish; the relay with a record create before\n" +
			"the publish (two-write); one raw JetStream publish per message; and the naive three writes\n" +
			"(record create, publish, record update). It prints messages/s, p50 and p99 latency, errors and\n" +
			"the bus's ratio to each, and fails if any message was not accepted.\n\n" +
			"With --url https://…/v1/tenants/<workspace> it drives that running bus instead, with unique, valid\n" +
			"snapshots and events on stories new to it, authenticated with --client-id and --client-secret\n" +
			"(or " + EnvClientSecret + "), a client certificate, or --token, and prints the same table without\n" +
			"baselines. --producers 1,4,16,64 measures each level of concurrency in turn and adds a line per level.\n\n" +
			"With --nats-url the bus and the baselines write to that NATS cluster instead of an embedded store,\n" +
			"every stream and bucket with --replicas replicas (3), every snapshot a compare-and-swap, as pool\n" +
			"replicas do; --cluster 3 starts three local nats-server processes (--nats-server) clustered with\n" +
			"JetStream for the run and stops them after it. --workspaces spreads the producers over that many\n" +
			"workspaces in every phase. --bus-replicas 3 runs the bus phase on three buses, each with its own\n" +
			"connection to the cluster, as a pool's replicas are, behind a front that sends each request to the\n" +
			"next in turn (as a Gateway balances per request), so that a story's snapshots go through every replica.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bf.apply(cmd, &o); err != nil {
				return usageError{err}
			}
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			o.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			o.Progress = cmd.ErrOrStderr()
			if bf.cpuProfile != "" {
				f, err := os.Create(bf.cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpu-profile: %w", err)
				}
				defer f.Close()
				o.CPUProfile = f
			}
			rep, runErr := bench.Run(cmd.Context(), o)
			if rep == nil {
				return runErr
			}
			if err := rep.WriteTable(cmd.OutOrStdout()); err != nil {
				return err
			}
			if bf.jsonPath != "" {
				b, err := json.MarshalIndent(rep, "", "  ")
				if err != nil {
					return err
				}
				if err := os.WriteFile(bf.jsonPath, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("--json: %w", err)
				}
			}
			if runErr != nil {
				return errors.Join(errors.New("the run had errors; its numbers are not a valid measurement"), runErr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Sync, "sync", o.Sync, "fsync of the embedded JetStream, or of the --cluster nodes: always (every write) or interval, as in serve")
	f.DurationVar(&o.SyncInterval, "sync-interval", 0, "fsync period with --sync=interval (nats-server's default is 2m)")
	f.IntSliceVar(&o.Producers, "producers", o.Producers, "concurrent producers in every phase; several levels, comma-separated (1,4,16,64), are measured in turn")
	f.IntVar(&o.Stories, "stories", o.Stories, "stories shared out among the producers, each owned by one")
	f.DurationVar(&o.Duration, "duration", o.Duration, "how long each phase is measured, after the warm-up")
	f.DurationVar(&o.Warmup, "warmup", o.Warmup, "how long each phase runs before it is measured")
	f.IntVar(&o.Messages, "messages", 0, "measure this many messages per phase instead of --duration")
	f.IntVar(&o.Rounds, "rounds", o.Rounds, "rounds of every phase; the median round (by bus ÷ relay two-write) is reported")
	f.StringSliceVar(&bf.phases, "phases", nil, "run only these phases, comma-separated (default all: bus,relay,relay-two-write,raw-single,three-write)")
	f.StringVar(&o.DataDir, "data-dir", "", "directory for the store's temporary files, or the --cluster nodes' (default the system's temporary directory)")
	f.StringVar(&o.NATSURL, "nats-url", "", "write to this external NATS cluster (client URLs, comma-separated) instead of an embedded JetStream; its own configuration decides its fsyncs")
	f.IntVar(&o.Cluster, "cluster", 0, "start this many local nats-server processes clustered with JetStream, fsyncing as --sync says, and write to them")
	f.StringVar(&o.NATSServer, "nats-server", o.NATSServer, "with --cluster: the nats-server binary, a path or a name in PATH")
	f.IntVar(&o.Replicas, "replicas", 0, "with --nats-url or --cluster: replicas of every stream and bucket (default 3, or a smaller --cluster's size)")
	f.IntVar(&o.Workspaces, "workspaces", o.Workspaces, "workspaces every phase writes to; producer i writes to workspace i modulo their number")
	f.IntVar(&o.BusReplicas, "bus-replicas", 1, "with --nats-url or --cluster: buses the bus phase runs behind a per-request round-robin front, each with its own connection, as a pool's replicas")
	f.StringVar(&bf.cpuProfile, "cpu-profile", "", "write a CPU profile (pprof) of this process during the first bus phase to this file: the bus with the load generator beside it")
	f.StringVar(&bf.jsonPath, "json", "", "also write the report as JSON to this file")
	f.StringVar(&bf.url, "url", "", "drive the running bus at this workspace URL, https://host/v1/tenants/<workspace>, instead of an embedded one")
	f.StringVar(&bf.clientID, "client-id", "", "with --url: the connection's client id")
	f.StringVar(&bf.clientSecret, "client-secret", "", "with --url: the connection's client secret; the environment is safer")
	f.StringVar(&bf.token, "token", "", "with --url: a bearer token to send instead of getting tokens with the client credentials")
	f.StringVar(&bf.systemID, "system-id", "", "with --url: the messages' system_id, one the connection may publish as (default the client id)")
	f.StringVar(&bf.tls.CAFile, "ca-file", "", "with --url: PEM CA certificates the bus's certificate is checked against instead of the system's")
	f.StringVar(&bf.tls.CertFile, "cert-file", "", "with --url: PEM client certificate, for a bus that takes mutual TLS")
	f.StringVar(&bf.tls.KeyFile, "key-file", "", "with --url: PEM private key of --cert-file")
	readEnv(cmd, "client-id", "client-secret", "ca-file")
	cmd.AddCommand(newBenchDensityCommand())
	return cmd
}

// apply puts the flags that are not bench.Options fields into o: the
// phases, and with --url the running bus.
func (bf *benchFlags) apply(cmd *cobra.Command, o *bench.Options) error {
	o.Phases = nil
	for _, p := range bf.phases {
		o.Phases = append(o.Phases, bench.PhaseName(p))
	}
	if o.NATSURL != "" {
		for _, name := range []string{"sync", "sync-interval", "nats-server"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s applies to the embedded store or --cluster; the --nats-url cluster's own configuration decides", name)
			}
		}
	}
	if cmd.Flags().Changed("nats-server") && o.Cluster == 0 {
		return errors.New("--nats-server needs --cluster")
	}
	if bf.url == "" {
		for _, name := range []string{"client-id", "client-secret", "token", "system-id", "ca-file", "cert-file", "key-file"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s needs --url", name)
			}
		}
		return nil
	}
	var errs []error
	for _, name := range embeddedOnly {
		if cmd.Flags().Changed(name) {
			errs = append(errs, fmt.Errorf("--%s applies to the embedded bus, not to --url", name))
		}
	}
	base, ws, err := bench.SplitWorkspaceURL(bf.url)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if bf.token != "" && !cmd.Flags().Changed("client-secret") {
		// A secret in the environment does not compete with --token.
		bf.clientSecret = ""
	}
	hc, err := client.NewHTTPClient(bf.tls, 30*time.Second)
	if err != nil {
		errs = append(errs, err)
	}
	r := &bench.Remote{URL: strings.TrimSuffix(bf.url, "/"), HTTPClient: hc, SystemID: bf.systemID}
	switch {
	case bf.token != "" && bf.clientSecret != "":
		errs = append(errs, errors.New("--token and a client secret: give one"))
	case bf.token != "":
		r.Tokens = client.StaticToken(bf.token)
	case bf.clientID == "":
		errs = append(errs, errors.New("--url needs --token, or --client-id with --client-secret, "+EnvClientSecret+" or --cert-file"))
	case bf.clientSecret == "" && bf.tls.CertFile == "":
		errs = append(errs, errors.New("--client-id needs --client-secret, "+EnvClientSecret+" or --cert-file"))
	default:
		tokenClient := *hc
		r.Tokens = &client.ClientCredentials{URL: base, Workspace: ws, ClientID: bf.clientID, ClientSecret: bf.clientSecret, HTTPClient: &tokenClient}
	}
	if r.SystemID == "" {
		r.SystemID = bf.clientID
	}
	if r.SystemID == "" && bf.token != "" {
		errs = append(errs, errors.New("--token needs --system-id, the system_id the token's connection may publish as"))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	o.Remote = r
	return nil
}
