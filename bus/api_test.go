package bus_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/docs"
	"github.com/storybus/storybus/internal/buildinfo"
	"github.com/storybus/storybus/internal/openapitest"
	"github.com/storybus/storybus/rules"
)

func TestUnknownRoutesAnswerMissingAuthenticationToken(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/"},
		{"GET", "/v1/tenants/newsroom/messages"},
		{"PUT", "/v1/tenants/newsroom/messages"},
		{"DELETE", "/v1/tenants/newsroom/tokens"},
		{"POST", "/v1/tenants/newsroom/messages/"},
		{"POST", "/v1/tenants/newsroom//messages"},
		{"POST", "/V1/tenants/newsroom/messages"},
		{"POST", "/v1/tenants/unknown/messages"},
		{"POST", "/v1/tenants/unknown/tokens"},
		{"POST", "/v2/anything"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, h.http.URL+tc.path, strings.NewReader("{}"))
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			a := decode(t, res)
			if a.Status != http.StatusForbidden || a.Message != bus.MissingAuthenticationToken {
				t.Fatalf("got %d %s", a.Status, a.Raw)
			}
		})
	}
}

func TestAcceptedAndDuplicateShapes(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	body := snapshot("", "story-1", 1, "cms")
	a := h.post(t, "newsroom", tok, body)
	expect(t, a, http.StatusAccepted, "")
	if a.Family != "story-context" || string(a.Raw["tolerated"]) != "[]" || string(a.Raw["message_type"]) != `"story.context"` {
		t.Fatalf("202 answer %s", a.Raw)
	}
	d := h.post(t, "newsroom", tok, body)
	expect(t, d, http.StatusOK, "")
	if !d.Duplicate || d.MessageID != a.MessageID {
		t.Fatalf("duplicate answer %s", d.Raw)
	}
}

func TestSeedRefusalExample(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	body := []byte(`{"som_version":"1.0","message_id":"not-a-uuid","message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"sequence_number":1,"state":"draft","headline":"Harbour bridge approved"}}`)
	a := h.post(t, "newsroom", tok, body)
	if a.Status != http.StatusBadRequest {
		t.Fatalf("status %d", a.Status)
	}
	want := []rules.Violation{
		{Source: "schema", Rule: "envelope.format.uuid", Path: "/message_id", Message: "must be a valid uuid"},
		{Source: "schema", Rule: "story-context.required", Path: "/payload", Message: "must have required property 'story_id'"},
	}
	if !slices.Equal(a.Violations, want) {
		t.Fatalf("violations %+v", a.Violations)
	}
}

func TestSizeLimit(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	big := bytes.Repeat([]byte(" "), bus.MaxBodyBytes+1)
	expect(t, h.post(t, "newsroom", tok, big), http.StatusRequestEntityTooLarge, rules.MessageTooLarge)
	// Size comes before authentication.
	expect(t, h.post(t, "newsroom", "", big), http.StatusRequestEntityTooLarge, rules.MessageTooLarge)

	// A chunked body, with no Content-Length, is read bounded.
	pr, pw := io.Pipe()
	go func() {
		chunk := bytes.Repeat([]byte(" "), 16<<10)
		for i := 0; i < 64; i++ { // 1 MiB: far over the limit
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", pr)
	req.Header.Set("Authorization", "Bearer "+tok)
	if req.ContentLength != 0 && req.ContentLength != -1 {
		t.Fatalf("test request has a length %d", req.ContentLength)
	}
	expect(t, h.do(t, req), http.StatusRequestEntityTooLarge, rules.MessageTooLarge)

	// Exactly at the limit is not too large.
	padded := snapshot("", "story-size", 1, "cms")
	padded = append(padded[:len(padded)-1], bytes.Repeat([]byte(" "), bus.MaxBodyBytes-len(padded))...)
	padded = append(padded, '}')
	if len(padded) != bus.MaxBodyBytes {
		t.Fatalf("padded to %d", len(padded))
	}
	expect(t, h.post(t, "newsroom", tok, padded), http.StatusAccepted, "")
}

func TestAuthentication(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	otherTok := h.token(t, "other", "cms", cmsSecret)
	expect(t, h.post(t, "newsroom", "", snapshot("", "s", 1, "cms")), http.StatusUnauthorized, rules.AuthTokenMissing)
	expect(t, h.post(t, "newsroom", "not.a.jwt", snapshot("", "s", 1, "cms")), http.StatusUnauthorized, rules.AuthTokenInvalid)
	altered := tok[:len(tok)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(tok, "AA")]
	expect(t, h.post(t, "newsroom", altered, snapshot("", "s", 1, "cms")), http.StatusUnauthorized, rules.AuthTokenInvalid)
	expect(t, h.post(t, "newsroom", otherTok, snapshot("", "s", 1, "cms")), http.StatusForbidden, rules.WorkspaceMismatch)

	// Basic credentials are checked.
	expect(t, h.tokenForm(t, "newsroom", "grant_type=client_credentials", "cms", "wrong"), http.StatusUnauthorized, rules.AuthCredentialsInvalid)

	h.clock.Advance(time.Hour + time.Minute)
	expect(t, h.post(t, "newsroom", tok, snapshot("", "s", 1, "cms")), http.StatusUnauthorized, rules.AuthTokenExpired)
}

// TestAuthorizationSchemeIsCaseInsensitive: RFC 7235 auth schemes are
// case-insensitive, so bearer and BEARER authenticate as Bearer does; another
// scheme, or a scheme without a token, is auth.token.missing.
func TestAuthorizationSchemeIsCaseInsensitive(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	seq := 0
	for _, tc := range []struct {
		header string
		status int
		rule   string
	}{
		{"Bearer " + tok, http.StatusAccepted, ""},
		{"bearer " + tok, http.StatusAccepted, ""},
		{"BEARER " + tok, http.StatusAccepted, ""},
		{"bEaReR " + tok, http.StatusAccepted, ""},
		{"Basic " + tok, http.StatusUnauthorized, rules.AuthTokenMissing},
		{"Bearertoken " + tok, http.StatusUnauthorized, rules.AuthTokenMissing},
		{"bearer", http.StatusUnauthorized, rules.AuthTokenMissing},
		{"bearer ", http.StatusUnauthorized, rules.AuthTokenMissing},
	} {
		seq++
		req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", bytes.NewReader(snapshot("", "scheme", seq, "cms")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", tc.header)
		if a := h.do(t, req); a.Status != tc.status || a.rule() != tc.rule {
			t.Errorf("Authorization %.12q…: %d %q, want %d %q", tc.header, a.Status, a.rule(), tc.status, tc.rule)
		}
	}
}

func TestRotationRevokesEarlierTokens(t *testing.T) {
	h := newHarness(t)
	old := h.token(t, "newsroom", "cms", cmsSecret)
	cfg := workspaceConfig("newsroom")
	now := time.Now()
	cfg.Connections[0].CredentialsRotatedAt = &now
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	expect(t, h.post(t, "newsroom", old, snapshot("", "s", 1, "cms")), http.StatusUnauthorized, rules.AuthTokenRevoked)
	fresh := h.token(t, "newsroom", "cms", cmsSecret)
	expect(t, h.post(t, "newsroom", fresh, snapshot("", "s", 1, "cms")), http.StatusAccepted, "")
}

func TestInactiveConnection(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	cfg := workspaceConfig("newsroom")
	cfg.Connections[0].Active = new(bool)
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	expect(t, h.post(t, "newsroom", tok, snapshot("", "s", 1, "cms")), http.StatusForbidden, rules.ConnectionInactive)
	expect(t, h.tokenForm(t, "newsroom", "grant_type=client_credentials", "cms", cmsSecret), http.StatusBadRequest, rules.ConnectionInactive)
}

func TestBadInputIsNotJSON(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
	for name, body := range map[string]string{
		"not JSON":        "hello",
		"trailing data":   `{"a":1} {"b":2}`,
		"array":           `[1,2,3]`,
		"string":          `"story"`,
		"deep nesting":    deep,
		"huge number":     `{"som_version":"1.0","n":1e400}`,
		"empty body":      "",
		"duplicate keys":  `{"a":1,"a":2}`,
		"invalid UTF-8":   "{\"a\":\"\xff\xfe\"}",
		"truncated":       `{"som_version":"1.0",`,
		"lone surrogate":  `{"a":"\ud800"}`,
		"control in text": "{\"a\":\"x\x01y\"}",
	} {
		t.Run(name, func(t *testing.T) {
			expect(t, h.post(t, "newsroom", tok, []byte(body)), http.StatusBadRequest, rules.MessageNotJSON)
		})
	}
	t.Run("wrong content type", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", bytes.NewReader(snapshot("", "s", 1, "cms")))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "text/plain")
		expect(t, h.do(t, req), http.StatusBadRequest, rules.MessageNotJSON)
	})
}

func TestGrants(t *testing.T) {
	h := newHarness(t)
	wire := h.token(t, "newsroom", "wire", wireSecret)
	expect(t, h.post(t, "newsroom", wire, snapshot("", "s", 1, "cms")), http.StatusForbidden, rules.GrantSystemID)
	event := []byte(`{"som_version":"1.0","message_id":"` + uuid.NewString() + `","message_type":"story.event","system_id":"wire","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"s","event":"published","occurred_at":"2026-11-29T09:00:00Z"}}`)
	expect(t, h.post(t, "newsroom", wire, event), http.StatusForbidden, rules.GrantMessageType)
}

func TestStoryOwnership(t *testing.T) {
	h := newHarness(t)
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	wire := h.token(t, "newsroom", "wire", wireSecret)
	expect(t, h.post(t, "newsroom", cms, snapshot("", "owned", 1, "cms")), http.StatusAccepted, "")
	a := h.post(t, "newsroom", wire, snapshot("", "owned", 2, "wire"))
	expect(t, a, http.StatusAccepted, "")
	if len(a.Tolerated) != 1 || a.Tolerated[0].Rule != rules.StoryNotOwner {
		t.Fatalf("tolerated %+v", a.Tolerated)
	}
	// The owner stays cms: under refuse, wire is refused.
	cfg := workspaceConfig("newsroom")
	cfg.Ownership.NotOwner = config.NotOwnerRefuse
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	expect(t, h.post(t, "newsroom", wire, snapshot(id, "owned", 3, "wire")), http.StatusConflict, rules.StoryNotOwner)
	// A hand-off reassigns the story without a restart.
	cfg = workspaceConfig("newsroom")
	cfg.Ownership.NotOwner = config.NotOwnerRefuse
	cfg.Ownership.Handoffs = []config.Handoff{{StoryID: "owned", ToSystemID: "wire"}}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	expect(t, h.post(t, "newsroom", wire, snapshot(id, "owned", 3, "wire")), http.StatusAccepted, "")
	expect(t, h.post(t, "newsroom", cms, snapshot("", "owned", 4, "cms")), http.StatusConflict, rules.StoryNotOwner)
}

func TestInFlightCarriesRetryAfter(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	id := uuid.NewString()
	stop := publish.Faults(func(_ context.Context, p publish.FaultPoint, got string) error {
		if p == publish.FaultAfterRecord && got == id {
			return publish.ErrStop
		}
		return nil
	})
	h.faults.Store(&stop)
	body := snapshot(id, "s", 1, "cms")
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("a stopped publish answered %d", res.StatusCode)
	}
	h.faults.Store(nil)
	a := h.post(t, "newsroom", tok, body)
	expect(t, a, http.StatusServiceUnavailable, rules.MessageInFlight)
	if ra := a.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After %q", ra)
	}
	h.clock.Advance(publish.Lease)
	expect(t, h.post(t, "newsroom", tok, body), http.StatusAccepted, "")
}

// TestStoreDownIsRegistryUnavailable: with its store down the bus answers
// 503 registry.unavailable, and stays ready for StoreReadyGrace after the
// store last answered (a cluster electing its meta leader), no longer.
func TestStoreDownIsRegistryUnavailable(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return h.srv.Ready(ctx)
	}
	if err := ready(); err != nil {
		t.Fatalf("not ready with the store up: %v", err)
	}
	h.ns.Shutdown()
	h.ns.WaitForShutdown()
	// The clock runs on from the wall clock: this check comes a second
	// or two after the store last answered.
	if err := ready(); err != nil {
		t.Fatalf("not ready within %v of the store's last answer: %v", bus.StoreReadyGrace, err)
	}
	a := h.post(t, "newsroom", tok, snapshot("", "s", 1, "cms"))
	expect(t, a, http.StatusServiceUnavailable, rules.RegistryUnavailable)
	h.clock.Advance(bus.StoreReadyGrace)
	if err := ready(); err == nil {
		t.Fatalf("ready with the store down for %v", bus.StoreReadyGrace)
	}
}

// TestNeverReadyBeforeTheStoreAnswers: the grace is for a store that
// answered; a bus whose store never did is not ready.
func TestNeverReadyBeforeTheStoreAnswers(t *testing.T) {
	h := newHarness(t)
	h.ns.Shutdown()
	h.ns.WaitForShutdown()
	if err := h.srv.Ready(context.Background()); err == nil {
		t.Fatal("ready with a store that never answered")
	}
}

func TestOperationsEndpoints(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	h.post(t, "newsroom", tok, snapshot("", "s", 1, "cms"))
	h.post(t, "newsroom", "", snapshot("", "s", 2, "cms"))
	ops, _ := openapitest.Serve(t, openapitest.OperationsPort, h.srv.OpsHandler())
	get := func(path string) (int, string) {
		res, err := http.Get(ops.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	_, metrics := get("/metrics")
	build := buildinfo.Get()
	for _, want := range []string{
		fmt.Sprintf(`storybus_build_info{commit=%q,goversion=%q,version=%q} 1`, build.Commit, build.GoVersion, build.Version),
		`storybus_publish_requests_total{rule="",status="202",workspace="newsroom"} 1`,
		`storybus_publish_requests_total{rule="auth.token.missing",status="401",workspace="newsroom"} 1`,
		`storybus_publish_duration_seconds_bucket`,
		`storybus_store_operation_duration_seconds_bucket{op="publish",workspace="newsroom"`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The description, and the SOM schemas its references resolve to
	// beside it.
	if code, body := get("/openapi.yaml"); code != http.StatusOK || body != string(docs.OpenAPI()) {
		t.Fatalf("/openapi.yaml %d, not the embedded description", code)
	}
	want, err := fs.ReadFile(docs.Files(), "som/envelope.json")
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get("/som/envelope.json"); code != http.StatusOK || body != string(want) {
		t.Fatalf("/som/envelope.json %d: %s", code, body)
	}
	for _, path := range []string{"/som/nothing.json", "/som/..%2Fopenapi.yaml", "/som/"} {
		if code, _ := get(path); code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, code)
		}
	}
	h.ns.Shutdown()
	h.ns.WaitForShutdown()
	h.clock.Advance(bus.StoreReadyGrace)
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz %d with the store down for %v", code, bus.StoreReadyGrace)
	}
}
