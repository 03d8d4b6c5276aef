package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/storybus/storybus/client"
)

// Exit codes of the producer and consumer commands, beyond ExitOK,
// ExitError and ExitUsage. When several messages end differently, the
// command exits with the largest.
const (
	// ExitRefused: the bus refused a message (400, 409, 413, another 4xx),
	// or the input is not a JSON object. Do not resend it unchanged.
	ExitRefused = 3
	// ExitNotAllowed: configuration. The credentials were refused even
	// with a fresh token (401), the connection may not do this (403, or
	// unauthorized_client at the token endpoint), or the bus's TLS
	// certificate is not trusted. Alert an administrator.
	ExitNotAllowed = 4
	// ExitNotDelivered: no final answer after every retry (timeouts,
	// network errors, 429, 5xx). The message is kept in the outbox.
	ExitNotDelivered = 5
)

const exitCodesHelp = `Exit codes: 0 success; 1 error (I/O, the outbox); 2 usage; 3 refused by the bus, or not a
JSON object: do not resend unchanged; 4 not allowed (401 after a fresh token, 403, the bus's
certificate not trusted): configuration; 5 not delivered after every retry: kept in the outbox.
With several messages, the largest code.`

// exitError is an error with its exit code.
type exitError struct {
	code int
	err  error
}

// Error returns the error's text.
func (e exitError) Error() string { return e.err.Error() }

// Unwrap returns the error.
func (e exitError) Unwrap() error { return e.err }

// ExitCode returns the process exit code.
func (e exitError) ExitCode() int { return e.code }

// exitCode maps a client error to an exit code.
func exitCode(err error) int {
	e, ok := client.AsError(err)
	switch {
	case err == nil:
		return ExitOK
	case !ok:
		return ExitError
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden || e.OAuth2 == client.OAuth2UnauthorizedClient,
		errors.Is(err, client.ErrUntrustedCertificate):
		return ExitNotAllowed
	case e.Refused():
		return ExitRefused
	case e.Temporary():
		return ExitNotDelivered
	}
	return ExitError
}

// PublishOptions are the flags of `storybus publish` and `storybus outbox
// resend`.
type PublishOptions struct {
	ConnectionOptions
	Outbox         string
	Attempts       int
	AttemptTimeout time.Duration
}

func (o *PublishOptions) bind(cmd *cobra.Command) {
	o.ConnectionOptions.bind(cmd)
	bindOutbox(cmd, &o.Outbox)
	f := cmd.Flags()
	f.IntVar(&o.Attempts, "attempts", client.DefaultRetryPolicy().Attempts, "most sends of a message before it is kept in the outbox")
	f.DurationVar(&o.AttemptTimeout, "timeout", 15*time.Second, "time limit of one attempt")
}

func bindOutbox(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "outbox", defaultOutboxDir(), "directory of the outbox that keeps undelivered messages")
	readEnv(cmd, "outbox")
}

// defaultOutboxDir is storybus/outbox in the user's state directory
// ($XDG_STATE_HOME, default ~/.local/state).
func defaultOutboxDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "storybus", "outbox")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "storybus", "outbox")
	}
	return "storybus-outbox"
}

// newClient validates the options and returns a client with its outbox.
func (o *PublishOptions) newClient(stderr io.Writer) (*client.Client, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Attempts < 1 || o.AttemptTimeout <= 0 {
		return nil, usageError{errors.New("--attempts and --timeout must be positive")}
	}
	policy := client.RetryPolicy{Attempts: o.Attempts}
	if err := policy.Validate(); err != nil {
		fmt.Fprintf(stderr, "storybus: warning: with --attempts %d a message can be given up in under 30 s, while the bus may still hold it\n", o.Attempts)
	}
	ob, err := client.OpenOutbox(o.Outbox)
	if err != nil {
		return nil, err
	}
	return client.New(client.Options{
		URL: o.URL, Workspace: o.Workspace, Tokens: o.tokens(), HTTPClient: o.http,
		AttemptTimeout: o.AttemptTimeout, Retry: policy, Outbox: ob,
	})
}

// maxPending bounds the messages in flight at once.
const maxPending = 8

func newPublishCommand() *cobra.Command {
	o := &PublishOptions{}
	cmd := &cobra.Command{
		Use:   "publish [FILE]...",
		Short: "Publish SOM messages from files or stdin, with safe retries and an outbox",
		Long: "publish sends the SOM messages in the files (\"-\" or none: stdin), each file holding one or more\n" +
			"JSON objects, one after another. Each message is sent exactly as it is written, and retried with\n" +
			"the same bytes on timeouts, network errors, 429 and 5xx, with backoff; a 401 once with a fresh\n" +
			"token; never on 400, 403, 409 or 413. A message whose retries run out is kept in the outbox\n" +
			"(storybus outbox list|resend), and the next messages of its story wait behind it.\n\n" +
			"For every message, one line of JSON on stdout: message_id, status, duplicate and tolerated on\n" +
			"success; status, rule, class, violations, kept, outbox_entry and error otherwise.\n\n" +
			exitCodesHelp,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.newClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if len(args) == 0 {
				args = []string{"-"}
			}
			pub := &publisher{c: c, out: json.NewEncoder(cmd.OutOrStdout())}
			pub.out.SetEscapeHTML(false)
			for _, name := range args {
				if err := pub.file(cmd, name); err != nil {
					pub.flush()
					// The exit code is the largest of all: a message
					// kept in the outbox before the bad input says 5.
					if e, ok := errors.AsType[exitError](err); ok {
						e.code = max(e.code, pub.code)
						return e
					}
					return err
				}
			}
			pub.flush()
			return pub.result()
		},
	}
	o.bind(cmd)
	return cmd
}

// publisher sends messages in order, a few at a time, and prints a line
// for each input item in input order.
type publisher struct {
	c       *client.Client
	out     *json.Encoder
	pending []inputItem
	code    int
	failed  int
	total   int
	lastErr error
}

// inputItem is one item of the input: a message handed to the client, or
// input that is not a message, with where it is.
type inputItem struct {
	pd  *client.Pending
	bad *ResultLine
}

func (p *publisher) file(cmd *cobra.Command, name string) error {
	var r io.Reader = cmd.InOrStdin()
	where := "stdin"
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r, where = f, name
	}
	in := newItemReader(r)
	for {
		raw, pos, err := in.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		item := inputItem{}
		if m, err := newInputMessage(raw); err != nil {
			at := fmt.Sprintf("%s:%d:%d", where, pos.line, pos.column)
			item.bad = &ResultLine{Input: at, Class: client.ClassInvalid.String(), Error: at + ": " + err.Error()}
		} else {
			item.pd = p.c.Send(cmd.Context(), m)
		}
		if len(p.pending) >= maxPending {
			p.print(p.pending[0])
			p.pending = p.pending[1:]
		}
		p.pending = append(p.pending, item)
	}
}

// newInputMessage makes an input item a message, or says why it is not
// one: not JSON, or JSON but not an object.
func newInputMessage(raw []byte) (*client.Message, error) {
	var v any
	if !json.Valid(raw) {
		return nil, fmt.Errorf("not JSON: %w", json.Unmarshal(raw, &v))
	}
	if raw[0] != '{' {
		_ = json.Unmarshal(raw, &v)
		return nil, fmt.Errorf("not a JSON object: %s", jsonKind(v))
	}
	return client.NewMessage(raw)
}

// jsonKind names the kind of a decoded JSON value.
func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

func (p *publisher) flush() {
	for _, it := range p.pending {
		p.print(it)
	}
	p.pending = nil
}

func (p *publisher) print(it inputItem) {
	p.total++
	if it.bad != nil {
		_ = p.out.Encode(it.bad)
		p.failed++
		p.lastErr = errors.New(it.bad.Error)
		p.code = max(p.code, ExitRefused)
		return
	}
	res, err := it.pd.Wait()
	_ = p.out.Encode(resultLine(it.pd.Message().ID(), res, err))
	if err != nil {
		p.failed++
		p.lastErr = err
		p.code = max(p.code, exitCode(err))
	}
}

func (p *publisher) result() error {
	if p.failed == 0 {
		return nil
	}
	err := p.lastErr
	if p.total > 1 {
		err = fmt.Errorf("%d of %d input items not published; the last: %w", p.failed, p.total, p.lastErr)
	}
	return exitError{code: p.code, err: err}
}

// ResultLine is the line of JSON printed for every input item.
type ResultLine struct {
	MessageID string `json:"message_id"`
	// Input is where an item that is not a message starts in the input,
	// FILE:LINE:COLUMN ("stdin" for the standard input).
	Input       string             `json:"input,omitempty"`
	Status      int                `json:"status"`
	Duplicate   bool               `json:"duplicate,omitempty"`
	Tolerated   []client.Violation `json:"tolerated,omitempty"`
	Rule        string             `json:"rule,omitempty"`
	Class       string             `json:"class,omitempty"`
	Violations  []client.Violation `json:"violations,omitempty"`
	Kept        bool               `json:"kept,omitempty"`
	OutboxEntry string             `json:"outbox_entry,omitempty"`
	Error       string             `json:"error,omitempty"`
}

func resultLine(id string, res *client.Result, err error) ResultLine {
	if err == nil {
		return ResultLine{MessageID: id, Status: res.Status, Duplicate: res.Duplicate, Tolerated: res.Tolerated}
	}
	l := ResultLine{MessageID: id, Error: err.Error()}
	if e, ok := client.AsError(err); ok {
		l.Status, l.Rule, l.Violations, l.Kept, l.OutboxEntry = e.Status, e.Rule, e.Violations, e.Kept, e.OutboxEntry
		l.Class = e.Class().String()
	}
	return l
}

// compact returns raw JSON on one line.
func compact(raw []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}
