package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/client"
)

// ConsumeOptions are the flags of `storybus consume`.
type ConsumeOptions struct {
	ConnectionOptions
	Families []string
	Max      int
	Wait     time.Duration
	Count    int
	Once     bool
	// DedupFile keeps the handled message_ids across runs.
	DedupFile string
}

// ConsumeLine is the line of JSON printed for every message: the delivery,
// with the SOM message on one line.
type ConsumeLine struct {
	MessageID   string          `json:"message_id"`
	MessageType string          `json:"message_type"`
	Family      string          `json:"family"`
	Delivery    int             `json:"delivery"`
	Message     json.RawMessage `json:"message"`
}

func newConsumeCommand() *cobra.Command {
	o := &ConsumeOptions{}
	cmd := &cobra.Command{
		Use:   "consume NAME",
		Short: "Receive a workspace's messages as a named, durable consumer",
		Long: "consume pulls the workspace's messages over the bus's HTTP pull API as the consumer NAME, a durable\n" +
			"subscription that carries on where it left off, and prints one line of JSON per message on stdout:\n" +
			"message_id, message_type, family, delivery and the message. A message is acknowledged once its\n" +
			"line is written; a message delivered again is printed once (across runs too, with --dedup-file).\n" +
			"It runs until interrupted, after --count messages, or after one pull with --once. Failed pulls\n" +
			"(no answer, 429, 5xx) are retried with backoff, except with --once.\n\n" +
			"Exit codes: 0 success or interrupted; 1 error; 2 usage; 3 refused (400, 409: a bad request, or a\n" +
			"consumer name of another connection); 4 not allowed (401 after a fresh token, 403: a family\n" +
			"outside the grant; the bus's certificate not trusted); 5 --once, and the pull got no answer or\n" +
			"429/5xx.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{errors.New("consume needs one consumer NAME")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			if o.Max < 1 || o.Max > 100 || o.Wait < 0 || o.Wait > 20*time.Second || o.Count < 0 {
				return usageError{errors.New("--max is 1 to 100, --wait 0s to 20s, --count 0 or more")}
			}
			var dedup *client.Dedup
			if o.DedupFile != "" {
				d, err := client.OpenDedup(o.DedupFile, 0, 0, nil)
				if err != nil {
					return err
				}
				defer d.Close()
				dedup = d
			}
			c, err := client.NewConsumer(client.ConsumerOptions{
				URL: o.URL, Workspace: o.Workspace, Name: args[0], Families: o.Families,
				Tokens: o.tokens(), HTTPClient: o.http, Max: o.Max, Wait: o.Wait, NoWait: o.Wait == 0, Dedup: dedup,
				OnError: func(err error) { fmt.Fprintln(cmd.ErrOrStderr(), "storybus: retrying:", err) },
			})
			if err != nil {
				return usageError{err}
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			print := func(d client.Delivery) error {
				return enc.Encode(ConsumeLine{d.MessageID, d.MessageType, d.Family, d.Delivery, compact(d.Message)})
			}
			if o.Once {
				return classify(explained(consumeOnce(cmd.Context(), c, print)))
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			printed := 0
			var writeErr error
			err = c.Run(ctx, func(_ context.Context, d client.Delivery) error {
				if writeErr = print(d); writeErr != nil {
					cancel()
					return writeErr
				}
				printed++
				if o.Count > 0 && printed >= o.Count {
					cancel()
				}
				return nil
			})
			if writeErr != nil {
				return writeErr
			}
			return classify(explained(err))
		},
	}
	o.bind(cmd)
	f := cmd.Flags()
	f.StringSliceVar(&o.Families, "family", nil, "a family to receive (repeatable; default every family the connection may consume)")
	f.IntVar(&o.Max, "max", 10, "most messages per pull, 1 to 100")
	f.DurationVar(&o.Wait, "wait", 20*time.Second, "how long a pull waits for a first message, 0s to 20s")
	f.IntVar(&o.Count, "count", 0, "stop after this many messages (0: run until interrupted)")
	f.BoolVar(&o.Once, "once", false, "pull once, print and acknowledge what came, and stop")
	f.StringVar(&o.DedupFile, "dedup-file", "", "a file that keeps the printed message_ids (24 hours, 100,000 at most), so that a message delivered again after a restart is not printed twice")
	return cmd
}

// explained adds the bus's explanation of a refusal (the first violation's
// message: "connection wire may not consume story-event") to an error for
// the person reading stderr. The client's own text leaves it out, since a
// program branches on status and rule, never on a message.
func explained(err error) error {
	e, ok := client.AsError(err)
	if !ok || len(e.Violations) == 0 || e.Violations[0].Message == "" {
		return err
	}
	return fmt.Errorf("%w (the bus says %q)", err, e.Violations[0].Message)
}

// consumeOnce pulls once, prints every message and acknowledges those
// printed; a failure to write stops the printing and is returned.
func consumeOnce(ctx context.Context, c *client.Consumer, print func(client.Delivery) error) error {
	var writeErr error
	err := c.RunOnce(ctx, func(_ context.Context, d client.Delivery) error {
		if writeErr == nil {
			writeErr = print(d)
		}
		return writeErr
	})
	if writeErr != nil {
		return writeErr
	}
	return err
}
