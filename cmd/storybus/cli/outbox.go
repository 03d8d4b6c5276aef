package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/client"
)

func newOutboxCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "List and resend the messages kept in the outbox",
		Long: "The outbox keeps, unchanged and on disk, the messages that storybus publish could not deliver:\n" +
			"their retries ran out, or the credentials were refused. resend sends them again, each story's in\n" +
			"order; the messages the bus refuses then move to the outbox's refused entries.",
	}
	cmd.AddCommand(newOutboxListCommand(), newOutboxResendCommand())
	return cmd
}

// OutboxLine is the line of JSON `storybus outbox list --json` prints per
// entry; the message is on one line.
type OutboxLine struct {
	client.Entry
	Message json.RawMessage `json:"message"`
}

func newOutboxListCommand() *cobra.Command {
	var dir string
	var asJSON, refused bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the kept messages, oldest first",
		Long: "list prints the pending entries of the outbox, oldest first: a table, or one line of JSON per\n" +
			"entry with --json (the entry and the message). --refused lists the entries the bus refused on a\n" +
			"resend instead. Exit codes: 0 listed (even none); 1 the outbox cannot be read; 2 usage.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ob, err := client.OpenOutbox(dir)
			if err != nil {
				return err
			}
			list := ob.List
			if refused {
				list = ob.Refused
			}
			entries, err := list()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetEscapeHTML(false)
				for _, e := range entries {
					if err := enc.Encode(OutboxLine{Entry: e, Message: compact(e.Message)}); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ENTRY\tMESSAGE ID\tTYPE\tSTORY/ASSET\tKEPT AT\tATTEMPTS\tLAST ANSWER")
			for _, e := range entries {
				last := "no answer"
				if e.Status != 0 {
					last = fmt.Sprintf("%d %s", e.Status, e.Rule)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.ID, e.MessageID, e.MessageType, storyColumn(e.Key),
					e.KeptAt.Format(time.RFC3339), e.Attempts, last)
			}
			return tw.Flush()
		},
	}
	bindOutbox(cmd, &dir)
	cmd.Flags().BoolVar(&asJSON, "json", false, "one line of JSON per entry, with its message")
	cmd.Flags().BoolVar(&refused, "refused", false, "list the entries the bus refused on a resend")
	return cmd
}

// storyColumn is what the STORY/ASSET column shows of an entry's key, the
// client's own name of what orders it: the story_id (story.context,
// story.event) or the asset_id (asset.reference), or "-" for a message
// ordered by neither.
func storyColumn(key string) string {
	for _, kind := range []string{"story:", "asset:"} {
		if id, ok := strings.CutPrefix(key, kind); ok {
			return id
		}
	}
	return "-"
}

func newOutboxResendCommand() *cobra.Command {
	o := &PublishOptions{}
	cmd := &cobra.Command{
		Use:   "resend",
		Short: "Resend the kept messages, each story's in order",
		Long: "resend sends every pending message of the outbox again, unchanged and with the same retries as\n" +
			"publish, each story's messages in order, the story of the oldest first. A delivered message\n" +
			"leaves the outbox; a refused one moves to the refused entries (outbox list --refused); after a\n" +
			"temporary failure the story's later messages stay kept behind it. One line of JSON per entry on\n" +
			"stdout, as publish prints.\n\n" + exitCodesHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.newClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			results, err := c.Resend(cmd.Context())
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			code, failed := ExitOK, 0
			var last error
			for _, r := range results {
				if err := enc.Encode(resultLine(r.Entry.MessageID, r.Result, r.Err)); err != nil {
					return err
				}
				if r.Err != nil {
					failed++
					last = r.Err
					code = max(code, exitCode(r.Err))
				}
			}
			if failed > 0 {
				return exitError{code: code, err: fmt.Errorf("%d of %d kept messages not delivered; the last: %w", failed, len(results), last)}
			}
			return nil
		},
	}
	o.bind(cmd)
	return cmd
}
