package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/bench"
)

func newBenchCommand() *cobra.Command {
	o := bench.DefaultOptions()
	var jsonPath string
	var phases []string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure publish throughput and latency: the bus against HTTP relays and raw JetStream, in one run",
		Long: "bench starts an embedded JetStream in a fresh temporary directory, the bus and a bare relay on\n" +
			"loopback ports with the same HTTP stack, then runs five phases in turn on the same store and\n" +
			"connection, each on fresh streams: the bus's HTTP publish API; the relay, which decodes\n" +
			"message_id and story_id and does one JetStream publish; the relay with a record create before\n" +
			"the publish (two-write); one raw JetStream publish per message; and the naive three writes\n" +
			"(record create, publish, record update). It prints messages/s, p50 and p99 latency, errors and\n" +
			"the bus's ratio to each, and fails if any message was not accepted.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Phases = nil
			for _, p := range phases {
				o.Phases = append(o.Phases, bench.PhaseName(p))
			}
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			o.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			o.Progress = cmd.ErrOrStderr()
			rep, runErr := bench.Run(cmd.Context(), o)
			if rep == nil {
				return runErr
			}
			if err := rep.WriteTable(cmd.OutOrStdout()); err != nil {
				return err
			}
			if jsonPath != "" {
				b, err := json.MarshalIndent(rep, "", "  ")
				if err != nil {
					return err
				}
				if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
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
	f.StringVar(&o.Sync, "sync", o.Sync, "embedded JetStream fsync: always (every write) or interval, as in serve")
	f.DurationVar(&o.SyncInterval, "sync-interval", 0, "fsync period with --sync=interval (nats-server's default is 2m)")
	f.IntVar(&o.Producers, "producers", o.Producers, "concurrent producers in every phase")
	f.IntVar(&o.Stories, "stories", o.Stories, "stories shared out among the producers, each owned by one")
	f.DurationVar(&o.Duration, "duration", o.Duration, "how long each phase is measured, after the warm-up")
	f.DurationVar(&o.Warmup, "warmup", o.Warmup, "how long each phase runs before it is measured")
	f.IntVar(&o.Messages, "messages", 0, "measure this many messages per phase instead of --duration")
	f.IntVar(&o.Rounds, "rounds", o.Rounds, "rounds of every phase; the median round (by bus ÷ relay two-write) is reported")
	f.StringSliceVar(&phases, "phases", nil, "run only these phases, comma-separated (default all: bus,relay,relay-two-write,raw-single,three-write)")
	f.StringVar(&o.DataDir, "data-dir", "", "directory for the store's temporary files (default the system's temporary directory)")
	f.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file")
	return cmd
}
