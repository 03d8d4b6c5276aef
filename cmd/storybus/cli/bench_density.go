package cli

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/bench"
)

func newBenchDensityCommand() *cobra.Command {
	o := bench.DefaultDensityOptions()
	jsonPath := ""
	cmd := &cobra.Command{
		Use:   "density",
		Short: "Measure a bus pool replica's memory per idle workspace and its start time, at several numbers of workspaces",
		Long: "density measures, for each level of --workspaces on a store of its own (a NATS JetStream server\n" +
			"embedded in the benchmark, one node, or with --cluster that many local nats-server processes): the replica `storybus serve --pool` of an empty pool, run\n" +
			"as a process of its own; the level's workspaces put into the pool, each of --connections\n" +
			"connections with a grant and limits; the replica's first start, which creates every workspace's\n" +
			"streams and buckets, and a restart over them, each timed to every workspace in force (the status\n" +
			"bucket) and to a publish to the last one answered 202; then, after a garbage collection and\n" +
			"--settle idle, the replica's resident memory, its Go heap and its goroutines. It prints the\n" +
			"marginal memory per workspace, the resident memory above the empty replica's, divided by the\n" +
			"workspaces, with the load average beside each level.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			o.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			o.Progress = cmd.ErrOrStderr()
			rep, runErr := bench.RunDensity(cmd.Context(), o)
			if rep != nil && len(rep.Levels) > 0 {
				if err := rep.WriteTable(cmd.OutOrStdout()); err != nil {
					return err
				}
			}
			if jsonPath != "" && rep != nil {
				b, err := json.MarshalIndent(rep, "", "  ")
				if err != nil {
					return err
				}
				if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("--json: %w", err)
				}
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.Workspaces, "workspaces", o.Workspaces, "the levels measured, comma-separated, each on a store of its own")
	f.IntVar(&o.Connections, "connections", o.Connections, "connections of every workspace")
	f.DurationVar(&o.Settle, "settle", o.Settle, "how long the replica idles after a garbage collection before its memory is read")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "the longest a start of the replica may take to serve every workspace")
	f.StringVar(&o.Binary, "binary", "", "the storybus binary run as the replica (default this one)")
	f.StringVar(&o.DataDir, "data-dir", "", "directory for the stores' temporary files (default the system's temporary directory)")
	f.IntVar(&o.Cluster, "cluster", 0, "store each level on this many local nats-server processes clustered with JetStream (streams and buckets with up to 3 replicas), as a pool's cluster, instead of one embedded node")
	f.StringVar(&o.NATSServer, "nats-server", o.NATSServer, "the nats-server binary --cluster starts: a path, or a name looked up in PATH")
	f.StringVar(&o.ProfileDir, "profile-dir", "", "write each level's idle replica's heap profile here (heap-<workspaces>.pprof)")
	f.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file")
	return cmd
}
