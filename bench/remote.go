package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/storybus/storybus/client"
)

// Remote is a running bus that the benchmark drives over HTTP or HTTPS, as
// its producers would: one workspace, one connection.
type Remote struct {
	// URL is the workspace's base URL, https://host/v1/tenants/<workspace>.
	URL string
	// Tokens gives the bearer tokens, fetched and refreshed as a producer
	// does (client.ClientCredentials) or fixed (client.StaticToken).
	Tokens client.TokenSource
	// HTTPClient sends the messages, with the TLS the bus needs; Run lets
	// its transport keep a connection for every producer.
	HTTPClient *http.Client
	// SystemID is the system_id of the messages: one the connection may
	// publish as.
	SystemID string
}

func (r *Remote) validate() error {
	var errs []error
	if _, _, err := SplitWorkspaceURL(r.URL); err != nil {
		errs = append(errs, err)
	}
	if r.Tokens == nil {
		errs = append(errs, errors.New("a running bus needs a token or client credentials"))
	}
	if r.SystemID == "" {
		errs = append(errs, errors.New("a running bus needs the system_id its connection may publish as"))
	}
	return errors.Join(errs...)
}

// SplitWorkspaceURL splits a workspace's base URL,
// https://host[/prefix]/v1/tenants/<workspace>, into the bus's base URL
// (https://host[/prefix]) and the workspace id.
func SplitWorkspaceURL(raw string) (base, workspace string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", "", fmt.Errorf("url %q: want http(s)://host/v1/tenants/<workspace>", raw)
	}
	prefix, ws, found := strings.Cut(strings.TrimSuffix(u.Path, "/"), "/v1/tenants/")
	if !found || ws == "" || strings.Contains(ws, "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("url %q: want http(s)://host/v1/tenants/<workspace>", raw)
	}
	u.Path, u.RawPath = prefix, ""
	return strings.TrimSuffix(u.String(), "/"), ws, nil
}

// remote runs the bus phase against a running bus.
type remote struct {
	o Options
	// run starts the story ids of this run, so that its stories are new
	// to the bus and their first snapshots have sequence number 1.
	run string
}

// newRemote gets a first token before any producer starts: with wrong
// credentials every producer would ask for tokens again and again, and the
// bus locks a client id out of its token endpoint after a few failures (10
// by default, for 10 minutes), the connection's real producers with it.
func newRemote(ctx context.Context, o Options) (*remote, error) {
	if _, err := o.Remote.Tokens.Token(ctx); err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	if tr, ok := o.Remote.HTTPClient.Transport.(*http.Transport); ok {
		keepAlive(tr, slices.Max(o.Producers))
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &remote{o: o, run: "bench-" + hex.EncodeToString(b)}, nil
}

// runPhase drives the bus with unique, valid snapshots and events on
// stories new to it. A running bus's stream cannot be counted here: a
// message is accepted when the bus answered 202.
func (r *remote) runPhase(ctx context.Context, name PhaseName, producers, round int) (Phase, error) {
	if name != PhaseBus {
		return Phase{}, fmt.Errorf("a running bus has no %s phase", name)
	}
	t := poster{client: r.o.Remote.HTTPClient, urls: []string{strings.TrimSuffix(r.o.Remote.URL, "/") + "/messages"}, tokens: r.o.Remote.Tokens}
	g := generator{
		systemID:    r.o.Remote.SystemID,
		storyPrefix: fmt.Sprintf("%s-p%d-r%d-", r.run, producers, round),
		events:      true,
	}
	ph := drive(ctx, []publisher{t}, r.o, producers, g)
	ph.Name = name
	if err := ctx.Err(); err != nil {
		return Phase{}, err
	}
	return ph, nil
}

func (r *remote) close() { r.o.Remote.HTTPClient.CloseIdleConnections() }
