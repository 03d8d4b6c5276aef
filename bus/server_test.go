package bus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/tlsconfig"
	"github.com/storybus/storybus/internal/certgen"
	"github.com/storybus/storybus/internal/openapitest"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/rules"
)

const (
	cmsSecret  = "cms-secret-0123456789abcdef0123456789"
	wireSecret = "wire-secret-0123456789abcdef0123456789"
)

type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// StoreNow makes the clock the store's too: the embedded server runs on
// this process's wall clock, and Advance moves both on.
func (c *fakeClock) StoreNow(context.Context) (time.Time, error) { return c.Now(), nil }

// harness is a bus serving two workspaces on a real embedded JetStream.
type harness struct {
	t      *testing.T
	ns     *server.Server
	srv    *bus.Server
	http   *httptest.Server
	clock  *fakeClock
	faults atomic.Pointer[publish.Faults]
	// api checks every answer of http against docs/openapi.yaml.
	api *openapitest.Checker
}

func workspaceConfig(id string) *config.Workspace {
	w := &config.Workspace{
		ID:         id,
		SigningKey: id + "-signing-key-0123456789abcdef0123",
		Connections: []config.Connection{
			{Name: "cms", SecretHash: config.HashSecret(cmsSecret), Grant: config.Grant{Publish: config.PublishGrant{
				SystemIDs: []string{"cms"}, MessageTypes: []string{"*"}}}},
			{Name: "wire", SecretHash: config.HashSecret(wireSecret), Grant: config.Grant{Publish: config.PublishGrant{
				SystemIDs: []string{"wire"}, MessageTypes: []string{"story.context"}}}},
		},
	}
	w.Default()
	return w
}

// newHarness serves the workspaces newsroom and other on a fresh embedded
// store; options, when given, change the server's options first.
func newHarness(t testing.TB, options ...func(*bus.Options)) *harness {
	t.Helper()
	ns, st := storetest.Embedded(t)
	h := &harness{ns: ns, clock: &fakeClock{}}
	if tt, ok := t.(*testing.T); ok {
		h.t = tt
	}
	o := bus.Options{
		Store: st, Clock: h.clock, StoreClock: h.clock, RequestTimeout: 5 * time.Second,
		Faults: func(ctx context.Context, p publish.FaultPoint, id string) error {
			if f := h.faults.Load(); f != nil {
				return (*f)(ctx, p, id)
			}
			return nil
		},
	}
	for _, option := range options {
		option(&o)
	}
	h.srv = bus.New(o)
	for _, id := range []string{"newsroom", "other"} {
		if err := h.srv.Apply(context.Background(), workspaceConfig(id)); err != nil {
			t.Fatal(err)
		}
	}
	h.http, h.api = openapitest.Serve(t, openapitest.PublishPort, h.srv.Handler())
	return h
}

// checkAPI fails t with the answers outside docs/openapi.yaml so far.
func (h *harness) checkAPI(t testing.TB) {
	t.Helper()
	if h.api != nil {
		h.api.Report(t)
	}
}

// tokenConfig is a real OAuth2 client-credentials client of a workspace's
// token endpoint, sending the credentials with HTTP Basic.
func (h *harness) tokenConfig(ws, client, secret string) *clientcredentials.Config {
	return &clientcredentials.Config{
		ClientID: client, ClientSecret: secret, AuthStyle: oauth2.AuthStyleInHeader,
		TokenURL: h.http.URL + "/v1/tenants/" + ws + "/tokens",
	}
}

// token gets a token through the OAuth2 client.
func (h *harness) token(t testing.TB, ws, client, secret string) string {
	t.Helper()
	tok, err := h.tokenConfig(ws, client, secret).Token(context.Background())
	if err != nil {
		t.Fatalf("token: %v", err)
	}
	if tok.TokenType != "Bearer" || tok.Extra("expires_in") == nil || !tok.Valid() {
		t.Fatalf("token response %+v", tok)
	}
	return tok.AccessToken
}

// tokenForm posts a token request with the form body, and the Basic
// credentials when client is not empty.
func (h *harness) tokenForm(t testing.TB, ws, form, client, secret string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/"+ws+"/tokens", strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if client != "" {
		req.SetBasicAuth(client, secret)
	}
	return h.do(t, req)
}

// answer is a decoded answer in any of the documented shapes.
type answer struct {
	Status     int
	Header     http.Header
	Raw        map[string]json.RawMessage
	Accepted   bool              `json:"accepted"`
	Duplicate  bool              `json:"duplicate"`
	MessageID  string            `json:"message_id"`
	Family     string            `json:"family"`
	Tolerated  []rules.Violation `json:"tolerated"`
	Violations []rules.Violation `json:"violations"`
	Message    string            `json:"message"`
	// Error, ErrorDescription and Rule are the token endpoint's OAuth2
	// error.
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
	Rule             string `json:"rule"`
}

func (a answer) rule() string {
	if a.Rule != "" {
		return a.Rule
	}
	if len(a.Violations) == 0 {
		return ""
	}
	return a.Violations[0].Rule
}

// checkShape fails unless the answer is in one of the documented shapes,
// with catalogued rules and their catalogued status.
func checkShape(t testing.TB, a answer) {
	t.Helper()
	if !bus.ValidRequestID(a.Header.Get(bus.RequestIDHeader)) {
		t.Fatalf("answer %d without a valid %s: %q", a.Status, bus.RequestIDHeader, a.Header.Get(bus.RequestIDHeader))
	}
	switch {
	case a.Status >= 500 && a.Status != http.StatusServiceUnavailable && a.Status != http.StatusInsufficientStorage:
		// 507 is workspace.storage_full's; every other 5xx is a 503.
		t.Fatalf("status %d is not documented", a.Status)
	case a.Raw["error"] != nil:
		checkTokenError(t, a)
		return
	case a.Raw["message"] != nil:
		if len(a.Raw) != 1 || a.Status != http.StatusForbidden {
			t.Fatalf("AWS-shaped answer %d %v", a.Status, a.Raw)
		}
	case a.Status == http.StatusAccepted:
		if !a.Accepted || a.Raw["tolerated"] == nil || a.Family == "" || a.MessageID == "" {
			t.Fatalf("202 shape: %s", a.Raw)
		}
	case a.Status == http.StatusOK:
		if !a.Accepted || !a.Duplicate || a.MessageID == "" || len(a.Raw) != 3 {
			t.Fatalf("200 shape: %s", a.Raw)
		}
	default:
		members := 2
		if a.Status >= 500 {
			// A 5xx refusal names the request for the producer to quote.
			var id string
			if err := json.Unmarshal(a.Raw["request_id"], &id); err != nil || id != a.Header.Get(bus.RequestIDHeader) {
				t.Fatalf("%d without the request id %q: %s", a.Status, a.Header.Get(bus.RequestIDHeader), a.Raw)
			}
			members = 3
		}
		if a.Accepted || len(a.Violations) == 0 || len(a.Raw) != members {
			t.Fatalf("refusal shape %d: %s", a.Status, a.Raw)
		}
		for _, v := range a.Violations {
			r, ok := rules.Lookup(v.Rule)
			if !ok {
				t.Fatalf("rule %q is not catalogued", v.Rule)
			}
			if v.Source != r.Source || v.Message == "" {
				t.Fatalf("violation %+v (catalogue source %s)", v, r.Source)
			}
			if v.Path != "" && !strings.HasPrefix(v.Path, "/") {
				t.Fatalf("path %q is not a JSON pointer", v.Path)
			}
		}
		if want := rules.Status(a.Violations[0].Rule); a.Status != want {
			t.Fatalf("status %d for %s, catalogue says %d", a.Status, a.rule(), want)
		}
		if (a.Status == 429 || a.Status == 503) && a.Header.Get("Retry-After") == "" {
			t.Fatalf("%d without Retry-After", a.Status)
		}
		checkBearerChallenge(t, a)
	}
	if a.Status != http.StatusAccepted {
		return
	}
	for _, v := range a.Tolerated {
		if r, ok := rules.Lookup(v.Rule); !ok || !r.Warning {
			t.Fatalf("tolerated %q is not a catalogued warning", v.Rule)
		}
	}
}

// checkTokenError fails unless the answer is an OAuth2 error of RFC 6749
// §5.2 whose rule the catalogue maps to its error code and status.
func checkTokenError(t testing.TB, a answer) {
	t.Helper()
	r, ok := rules.Lookup(a.Rule)
	if !ok || r.OAuth2Error == "" || a.Error != r.OAuth2Error || a.Status != rules.TokenStatus(a.Rule) {
		t.Fatalf("OAuth2 error %d %s: the catalogue maps %q to %q %d", a.Status, a.Raw, a.Rule, r.OAuth2Error, rules.TokenStatus(a.Rule))
	}
	members := 3
	if a.Raw["request_id"] != nil && a.Status >= 500 {
		members++
	}
	if len(a.Raw) != members || a.ErrorDescription == "" || strings.ContainsAny(a.ErrorDescription, "\"\\") {
		t.Fatalf("OAuth2 error members %s", a.Raw)
	}
	for _, c := range a.ErrorDescription {
		if c < 0x20 || c > 0x7e {
			t.Fatalf("error_description %q has a character RFC 6749 §5.2 does not allow", a.ErrorDescription)
		}
	}
	if cc, pragma := a.Header.Get("Cache-Control"), a.Header.Get("Pragma"); cc != "no-store" || pragma != "no-cache" {
		t.Fatalf("OAuth2 error with Cache-Control %q, Pragma %q", cc, pragma)
	}
	if got := a.Header.Get("WWW-Authenticate"); (a.Status == http.StatusUnauthorized) != (got == `Basic realm="storybus"`) {
		t.Fatalf("%d with WWW-Authenticate %q", a.Status, got)
	}
	if (a.Status == 429 || a.Status == 503) && a.Header.Get("Retry-After") == "" {
		t.Fatalf("%d without Retry-After", a.Status)
	}
}

// checkBearerChallenge fails unless a 401 of the bearer routes carries
// RFC 6750's challenge: error="invalid_token" when a token was refused,
// no error when none was sent.
func checkBearerChallenge(t testing.TB, a answer) {
	t.Helper()
	got := a.Header.Get("WWW-Authenticate")
	if a.Status != http.StatusUnauthorized {
		if got != "" {
			t.Fatalf("%d with WWW-Authenticate %q", a.Status, got)
		}
		return
	}
	want := `Bearer realm="storybus"`
	if a.rule() != rules.AuthTokenMissing {
		want += `, error="invalid_token", error_description="`
	}
	if a.rule() == rules.AuthTokenMissing && got != want || !strings.HasPrefix(got, want) {
		t.Fatalf("401 %s with WWW-Authenticate %q, want %s…", a.rule(), got, want)
	}
}

func decode(t testing.TB, res *http.Response) answer {
	t.Helper()
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{Status: res.StatusCode, Header: res.Header}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("answer %d has Content-Type %q: %s", res.StatusCode, ct, body)
	}
	if err := json.Unmarshal(body, &a.Raw); err != nil {
		t.Fatalf("answer %d is not a JSON object: %s", res.StatusCode, body)
	}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatal(err)
	}
	checkShape(t, a)
	return a
}

// metrics scrapes the operations port's /metrics.
func (h *harness) metrics(t testing.TB) string {
	t.Helper()
	rec := httptest.NewRecorder()
	ops := openapitest.NewChecker(openapitest.OperationsPort)
	ops.Handler(h.srv.OpsHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	ops.Report(t)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	return rec.Body.String()
}

// post publishes body to the workspace with the token.
func (h *harness) post(t testing.TB, ws, token string, body []byte) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/"+ws+"/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return h.do(t, req)
}

func (h *harness) do(t testing.TB, req *http.Request) answer {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	a := decode(t, res)
	h.checkAPI(t)
	return a
}

func snapshot(id, story string, seq int, system string) []byte {
	if id == "" {
		id = uuid.NewString()
	}
	return []byte(fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.context","system_id":%q,"timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":%q,"sequence_number":%d,"state":"draft","headline":"Harbour bridge approved"}}`, id, system, story, seq))
}

func expect(t *testing.T, a answer, status int, rule string) {
	t.Helper()
	if a.Status != status || a.rule() != rule {
		t.Fatalf("got %d %q %s, want %d %q", a.Status, a.rule(), a.Raw, status, rule)
	}
}

// TestPlainHTTPRefusesAWorkspacesKeyPair: a bus serving plain HTTP cannot
// present a workspace's own key pair, so it refuses a configuration that
// brings one, saying why, and serves the workspace's previous one.
func TestPlainHTTPRefusesAWorkspacesKeyPair(t *testing.T) {
	h := newHarness(t)
	ca, err := certgen.NewCA("brand CA")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Sign(certgen.Leaf{CommonName: "news", Hosts: []string{"news.brand.example"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := workspaceConfig("newsroom")
	cfg.TLS = &config.WorkspaceTLS{Certificate: string(p.CertPEM), Key: string(p.KeyPEM), Hosts: []string{"news.brand.example"}}
	if err := h.srv.Apply(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "serves plain HTTP") {
		t.Fatalf("Apply: %v", err)
	}
	if got, ok := h.srv.Config("newsroom"); !ok || got.TLS != nil {
		t.Fatal("the refused configuration replaced the one in force")
	}
}

// TestWorkspaceKeyPairExpiryMetric: a bus serving HTTPS presents a
// workspace's own key pair, and reports when it expires by workspace; a
// configuration without one takes the series away.
func TestWorkspaceKeyPairExpiryMetric(t *testing.T) {
	h := newHarness(t, func(o *bus.Options) { o.Hosts = tlsconfig.NewHosts() })
	ca, err := certgen.NewCA("brand CA")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Sign(certgen.Leaf{CommonName: "news", Hosts: []string{"news.brand.example"}, NotAfter: time.Unix(1_900_000_000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := workspaceConfig("newsroom")
	cfg.TLS = &config.WorkspaceTLS{Certificate: string(p.CertPEM), Key: string(p.KeyPEM), Hosts: []string{"news.brand.example"}}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if h.srv.Hosts().Lookup("news.brand.example") == nil {
		t.Error("the workspace's pair is not presented for its host name")
	}
	if err := h.hasSeries(`storybus_workspace_tls_certificate_expiry_timestamp_seconds{workspace="newsroom"} 1.9e+09`); err != nil {
		t.Fatal(err)
	}
	if m := h.metrics(t); strings.Contains(m, `storybus_workspace_tls_certificate_expiry_timestamp_seconds{workspace="other"}`) {
		t.Error("an expiry reported for a workspace without a key pair")
	}
	if err := h.srv.Apply(context.Background(), workspaceConfig("newsroom")); err != nil {
		t.Fatal(err)
	}
	if m := h.metrics(t); strings.Contains(m, "storybus_workspace_tls_certificate_expiry_timestamp_seconds") || h.srv.Hosts().Lookup("news.brand.example") != nil {
		t.Error("the pair is still presented, or reported, once the configuration has none")
	}
}
