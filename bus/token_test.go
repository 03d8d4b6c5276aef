package bus_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/rules"
)

// tokenAnswer asks a replica for a token without failing the test.
func (h *harness) tokenAnswer(t *testing.T, client, secret string) answer {
	t.Helper()
	return h.tokenForm(t, "newsroom", "grant_type=client_credentials", client, secret)
}

// tokenFrom asks for a token with the client's credentials as if from
// addr, through a trusted proxy (the harness's peer, 127.0.0.1).
func (h *harness) tokenFrom(t *testing.T, addr, client, secret string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/tokens", strings.NewReader("grant_type=client_credentials"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", addr)
	req.SetBasicAuth(client, secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	a := answer{Status: res.StatusCode, Header: res.Header}
	if err := json.NewDecoder(res.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestTokenFailuresElsewhereDoNotLockOutTheClient fails cms's secret
// through two bus processes on one JetStream, from an attacker's addresses:
// the failures add up across replicas and lock the attacker out, but the
// producer, from its own address with the right secret, always gets its
// token; a client id guessed at from many addresses is open only to the
// addresses it succeeded from, until the window has passed.
func TestTokenFailuresElsewhereDoNotLockOutTheClient(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	o := bus.Options{Clock: clock, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		TokenAttempts: &bus.TokenAttempts{PerClientAddress: 4, PerAddress: 100, PerClient: 12, Window: 10 * time.Minute}}
	replicas := []*harness{newReplicaWith(t, ns, o, workspaceConfig("newsroom")), newReplicaWith(t, ns, o, workspaceConfig("newsroom"))}
	const producer, attacker = "192.0.2.10", "203.0.113.1"
	wrong := "wrong-secret-0123456789abcdef0123456789"
	expect(t, replicas[0].tokenFrom(t, producer, "cms", cmsSecret), http.StatusOK, "")

	for i := range 4 {
		expect(t, replicas[i%2].tokenFrom(t, attacker, "cms", wrong), http.StatusUnauthorized, rules.AuthCredentialsInvalid)
		clock.Advance(time.Minute)
	}
	// The fourth failure, at 09:03, locked cms out from the attacker's
	// address until 09:13, the right secret too, on both replicas.
	for _, h := range replicas {
		a := h.tokenFrom(t, attacker, "cms", cmsSecret)
		expect(t, a, http.StatusTooManyRequests, rules.AuthAttemptsExceeded)
		expectRetryAfter(t, a, 600-60)
		expect(t, h.tokenFrom(t, producer, "cms", cmsSecret), http.StatusOK, "")
		expect(t, h.tokenFrom(t, "198.51.100.1", "cms", cmsSecret), http.StatusOK, "")
	}

	// Guesses from ever new addresses: at twelve failures in the window
	// the client id is guarded. A new address is refused, the right secret
	// too; the producer's known addresses are not.
	for i := range 8 {
		expect(t, replicas[i%2].tokenFrom(t, "203.0.113."+strconv.Itoa(10+i), "cms", wrong), http.StatusUnauthorized, rules.AuthCredentialsInvalid)
	}
	for _, h := range replicas {
		a := h.tokenFrom(t, "198.51.100.77", "cms", cmsSecret)
		expect(t, a, http.StatusTooManyRequests, rules.AuthAttemptsExceeded)
		expect(t, h.tokenFrom(t, producer, "cms", cmsSecret), http.StatusOK, "")
		expect(t, h.tokenFrom(t, "198.51.100.1", "cms", cmsSecret), http.StatusOK, "")
		// Another client id is not affected.
		expect(t, h.tokenFrom(t, "198.51.100.77", "wire", wireSecret), http.StatusOK, "")
	}
	clock.Advance(10 * time.Minute)
	expect(t, replicas[1].tokenFrom(t, "198.51.100.77", "cms", cmsSecret), http.StatusOK, "")
}

// TestUnknownAndKnownClientIDsAnswerAlike fails a known client id's secret
// and an unknown client id the same number of times: the answers are the
// same, both are locked out alike, and both did the same writes to the
// store, so neither the answers nor the work tell an attacker which ids
// exist.
func TestUnknownAndKnownClientIDsAnswerAlike(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	h := newReplicaWith(t, ns, bus.Options{Clock: clock, TokenAttempts: &bus.TokenAttempts{PerClientAddress: 3, Window: 10 * time.Minute}}, workspaceConfig("newsroom"))
	h.token(t, "newsroom", "wire", wireSecret) // the limits bucket is made on first use
	kv, err := connectStore(t, ns).JS.KeyValue(context.Background(), limits.BucketName("newsroom"))
	if err != nil {
		t.Fatal(err)
	}
	writes := func() uint64 {
		st, err := kv.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	}
	var answers [2][]string
	var written [2]uint64
	for i, client := range []string{"cms", "nobody-by-this-name"} {
		before := writes()
		for range 4 {
			a := h.tokenAnswer(t, client, "wrong-secret-0123456789abcdef0123456789")
			answers[i] = append(answers[i], fmt.Sprintf("%d %s %s", a.Status, a.Rule, a.Header.Get("Retry-After")))
		}
		written[i] = writes() - before
	}
	if !slices.Equal(answers[0], answers[1]) {
		t.Fatalf("a known client id answered %q, an unknown one %q", answers[0], answers[1])
	}
	if last := answers[1][3]; !strings.HasPrefix(last, "429 ") {
		t.Fatalf("an unknown client id is never locked out: %q", answers[1])
	}
	if written[0] != written[1] {
		t.Fatalf("a known client id's failures wrote %d times, an unknown one's %d", written[0], written[1])
	}
	// A client id longer than any a workspace has is refused before the
	// store sees it: one so long would not fit in a store request, whose
	// refusal closed the bus's store connection for good.
	expect(t, h.tokenAnswer(t, strings.Repeat("x", 3_500), "wrong-secret-0123456789abcdef0123456789"), http.StatusUnauthorized, rules.AuthCredentialsInvalid)
	h.token(t, "newsroom", "wire", wireSecret)
}

// TestTokenAttemptsWindow: failures further apart than the window never
// lock a client out, and guessed client ids lock the address out.
func TestTokenAttemptsWindow(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	o := bus.Options{Clock: clock, TokenAttempts: &bus.TokenAttempts{PerClientAddress: 3, PerAddress: 5, Window: time.Minute}}
	replicas := []*harness{newReplicaWith(t, ns, o, workspaceConfig("newsroom")), newReplicaWith(t, ns, o, workspaceConfig("newsroom"))}

	// Two failures per window, for five windows: never three in one.
	for i := range 10 {
		expect(t, replicas[i%2].tokenAnswer(t, "cms", "wrong"), http.StatusUnauthorized, rules.AuthCredentialsInvalid)
		if i%2 == 1 {
			clock.Advance(time.Minute)
		}
	}
	replicas[0].token(t, "newsroom", "cms", cmsSecret)

	// Guessed client ids: five failures from this address lock the address
	// out, whatever client id it sends next.
	var guessed []string
	for i := range 5 {
		guessed = append(guessed, uuid.NewString())
		expect(t, replicas[i%2].tokenAnswer(t, guessed[i], "guess"), http.StatusUnauthorized, rules.AuthCredentialsInvalid)
	}
	for _, h := range replicas {
		a := h.tokenAnswer(t, "wire", wireSecret)
		expect(t, a, http.StatusTooManyRequests, rules.AuthAttemptsExceeded)
		expectRetryAfter(t, a, 60)
	}
	// Only the address and the known client id have counters.
	kv, err := connectStore(t, ns).JS.KeyValue(context.Background(), limits.BucketName("newsroom"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range keys.Keys() {
		got = append(got, k)
	}
	// The address, cms from it (failed, and known from its success), and
	// each guessed id from it: unknown ids are counted as known ones are.
	want := map[string]bool{limits.AddressAttemptsKey("127.0.0.1"): true,
		limits.ClientAddressAttemptsKey("cms", "127.0.0.1"): true, limits.KnownAddressKey("cms", "127.0.0.1"): true}
	for _, id := range guessed {
		want[limits.ClientAddressAttemptsKey(id, "127.0.0.1")] = true
	}
	slices.Sort(got)
	if wantKeys := slices.Sorted(maps.Keys(want)); !slices.Equal(got, wantKeys) {
		t.Fatalf("keys %v, want %v", got, wantKeys)
	}
	clock.Advance(time.Minute)
	replicas[1].token(t, "newsroom", "wire", wireSecret)
}

// retrieveError asks for a token through the OAuth2 client, which must
// fail with an OAuth2 error; it returns the error and its body decoded.
func retrieveError(t *testing.T, cc *clientcredentials.Config) (*oauth2.RetrieveError, answer) {
	t.Helper()
	_, err := cc.Token(context.Background())
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		t.Fatalf("token request did not fail with an OAuth2 error: %v", err)
	}
	a := answer{Status: re.Response.StatusCode, Header: re.Response.Header}
	if err := json.Unmarshal(re.Body, &a.Raw); err != nil {
		t.Fatalf("error body %s", re.Body)
	}
	if err := json.Unmarshal(re.Body, &a); err != nil {
		t.Fatal(err)
	}
	checkShape(t, a)
	return re, a
}

// TestTokenEndpointWithOAuth2Client drives the token endpoint with
// golang.org/x/oauth2's client-credentials client: both ways of sending
// the client's credentials get a token that publishes, and every error is
// one the client reads by its code, with the catalogued rule beside it.
func TestTokenEndpointWithOAuth2Client(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	cfg := workspaceConfig("newsroom")
	// RFC 6749 §2.3.1: the client form-urlencodes its id and secret
	// before Basic encoding; this secret is not the same encoded.
	const oddSecret = "p+ss%word/0123456789abcdef0123456789"
	cfg.Connections = append(cfg.Connections, config.Connection{Name: "odd client", SecretHash: config.HashSecret(oddSecret)})
	cfg.Connections = append(cfg.Connections, config.Connection{Name: "off", SecretHash: config.HashSecret(cmsSecret), Active: new(bool)})
	cfg.Default()
	h := newReplicaWith(t, ns, bus.Options{Clock: clock, TokenAttempts: &bus.TokenAttempts{PerClientAddress: 3, Window: 10 * time.Minute}}, cfg)
	ctx := context.Background()

	for _, style := range []oauth2.AuthStyle{oauth2.AuthStyleInHeader, oauth2.AuthStyleInParams} {
		cc := h.tokenConfig("newsroom", "cms", cmsSecret)
		cc.AuthStyle = style
		tok, err := cc.Token(ctx)
		if err != nil {
			t.Fatalf("auth style %d: %v", style, err)
		}
		if tok.TokenType != "Bearer" || tok.Extra("expires_in") != float64(3600) {
			t.Fatalf("auth style %d: token %+v", style, tok)
		}
		expect(t, h.post(t, "newsroom", tok.AccessToken, snapshot("", uuid.NewString(), 1, "cms")), http.StatusAccepted, "")
	}
	odd := h.tokenConfig("newsroom", "odd client", oddSecret)
	if _, err := odd.Token(ctx); err != nil {
		t.Fatalf("form-urlencoded Basic credentials: %v", err)
	}
	// The same secret Basic-encoded without form-urlencoding first is
	// another secret.
	expect(t, h.tokenForm(t, "newsroom", "grant_type=client_credentials", "odd+client", oddSecret), http.StatusUnauthorized, rules.AuthCredentialsInvalid)

	for _, tc := range []struct {
		name   string
		change func(*clientcredentials.Config)
		status int
		code   string
		rule   string
	}{
		{"wrong secret", func(c *clientcredentials.Config) { c.ClientSecret = "wrong" }, 401, "invalid_client", rules.AuthCredentialsInvalid},
		{"wrong secret in the body", func(c *clientcredentials.Config) { c.ClientSecret, c.AuthStyle = "wrong", oauth2.AuthStyleInParams }, 401, "invalid_client", rules.AuthCredentialsInvalid},
		{"unknown client", func(c *clientcredentials.Config) { c.ClientID = "nobody" }, 401, "invalid_client", rules.AuthCredentialsInvalid},
		{"another grant", func(c *clientcredentials.Config) { c.EndpointParams = url.Values{"grant_type": {"password"}} }, 400, "unsupported_grant_type", rules.AuthGrantUnsupported},
		{"no grant", func(c *clientcredentials.Config) { c.EndpointParams = url.Values{"grant_type": {""}} }, 400, "invalid_request", rules.AuthRequestInvalid},
		{"two ways at once", func(c *clientcredentials.Config) { c.EndpointParams = url.Values{"client_secret": {cmsSecret}} }, 400, "invalid_request", rules.AuthRequestInvalid},
		{"a scope", func(c *clientcredentials.Config) { c.Scopes = []string{"publish"} }, 400, "invalid_scope", rules.AuthScopeInvalid},
		{"inactive connection", func(c *clientcredentials.Config) { c.ClientID = "off" }, 400, "unauthorized_client", rules.ConnectionInactive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := h.tokenConfig("newsroom", "cms", cmsSecret)
			tc.change(cc)
			re, a := retrieveError(t, cc)
			if re.ErrorCode != tc.code || re.Response.StatusCode != tc.status || a.Rule != tc.rule || re.ErrorDescription == "" {
				t.Fatalf("got %d %q %q (%s), want %d %q %q", re.Response.StatusCode, re.ErrorCode, a.Rule, re.Body, tc.status, tc.code, tc.rule)
			}
		})
	}

	// Two more wrong secrets make three failures of cms: locked out, the
	// right secret too, until Retry-After.
	for range 2 {
		bad := h.tokenConfig("newsroom", "cms", "wrong")
		retrieveError(t, bad)
	}
	re, a := retrieveError(t, h.tokenConfig("newsroom", "cms", cmsSecret))
	if re.ErrorCode != "invalid_client" || re.Response.StatusCode != http.StatusTooManyRequests || a.Rule != rules.AuthAttemptsExceeded {
		t.Fatalf("locked out: %d %s", re.Response.StatusCode, re.Body)
	}
	expectRetryAfter(t, a, 600)

	// The failed-attempt counters unreachable: refused, never let through.
	ns.Shutdown()
	ns.WaitForShutdown()
	re, a = retrieveError(t, h.tokenConfig("newsroom", "wire", wireSecret))
	if re.ErrorCode != "temporarily_unavailable" || re.Response.StatusCode != http.StatusServiceUnavailable || a.Rule != rules.RegistryUnavailable {
		t.Fatalf("counters unreachable: %d %s", re.Response.StatusCode, re.Body)
	}
}

// TestTokenRequestMustBeAnOAuth2Request: what RFC 6749 §4.4.2 and §2.3
// refuse, the token endpoint refuses, and says why.
func TestTokenRequestMustBeAnOAuth2Request(t *testing.T) {
	h := newHarness(t)
	post := func(contentType, body string, header map[string]string) answer {
		req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/tokens", strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return h.do(t, req)
	}
	basic := func(id, secret string) map[string]string {
		return map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(id+":"+secret))}
	}
	const form = "application/x-www-form-urlencoded"
	grant := "grant_type=client_credentials"
	for _, tc := range []struct {
		name, contentType, body string
		header                  map[string]string
		status                  int
		rule                    string
	}{
		{"Basic alone, no grant_type", "", "", basic("cms", cmsSecret), 400, rules.AuthRequestInvalid},
		{"a JSON body", "application/json", `{"grant_type":"client_credentials"}`, basic("cms", cmsSecret), 400, rules.AuthRequestInvalid},
		{"no grant_type", form, "client_id=cms&client_secret=" + cmsSecret, nil, 400, rules.AuthRequestInvalid},
		{"grant_type twice", form, grant + "&" + grant, basic("cms", cmsSecret), 400, rules.AuthRequestInvalid},
		{"not form-urlencoded", form, grant + "&x=%zz", basic("cms", cmsSecret), 400, rules.AuthRequestInvalid},
		{"over 4 KiB", form, grant + "&x=" + strings.Repeat("a", 4096), basic("cms", cmsSecret), 400, rules.AuthRequestInvalid},
		{"client_secret without client_id", form, grant + "&client_secret=" + cmsSecret, nil, 400, rules.AuthRequestInvalid},
		{"another client_id beside Basic", form, grant + "&client_id=wire", basic("cms", cmsSecret), 400, rules.AuthRequestInvalid},
		{"no credentials", form, grant, nil, 401, rules.AuthCredentialsInvalid},
		{"client_id alone", form, grant + "&client_id=cms", nil, 401, rules.AuthCredentialsInvalid},
		{"a Bearer header", form, grant, map[string]string{"Authorization": "Bearer x"}, 401, rules.AuthCredentialsInvalid},
		{"Basic that is not form-urlencoded", form, grant, basic("cms", "100%"), 401, rules.AuthCredentialsInvalid},
		{"another grant", form, "grant_type=authorization_code&code=x", basic("cms", cmsSecret), 400, rules.AuthGrantUnsupported},
		{"a scope", form, grant + "&scope=publish", basic("cms", cmsSecret), 400, rules.AuthScopeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, post(tc.contentType, tc.body, tc.header), tc.status, tc.rule)
		})
	}
	// Accepted: the same client_id beside Basic, an empty scope, and
	// parameters the grant does not use; and the success is never cached.
	for _, body := range []string{grant + "&client_id=cms", grant + "&scope=", grant + "&audience=x"} {
		req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/tokens", strings.NewReader(body))
		req.Header.Set("Content-Type", form+"; charset=utf-8")
		req.SetBasicAuth("cms", cmsSecret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var tr bus.TokenResponse
		err = json.NewDecoder(res.Body).Decode(&tr)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || tr.AccessToken == "" || tr.TokenType != "Bearer" || tr.ExpiresIn != 3600 {
			t.Fatalf("%s: %d %+v %v", body, res.StatusCode, tr, err)
		}
		if cc, pragma := res.Header.Get("Cache-Control"), res.Header.Get("Pragma"); cc != "no-store" || pragma != "no-cache" {
			t.Fatalf("%s: Cache-Control %q, Pragma %q", body, cc, pragma)
		}
	}
}

// TestBearerChallenge: every 401 of the publish and consumer routes says
// Bearer, with error="invalid_token" when a token was sent and refused
// (RFC 6750 §3), and without an error when none was (§3.1).
func TestBearerChallenge(t *testing.T) {
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	const challenge = `Bearer realm="storybus"`
	check := func(a answer, rule, want string) {
		t.Helper()
		expect(t, a, http.StatusUnauthorized, rule)
		if got := a.Header.Get("WWW-Authenticate"); got != want {
			t.Fatalf("%s: WWW-Authenticate %q, want %q", rule, got, want)
		}
	}
	check(h.post(t, "newsroom", "", snapshot("", "s", 1, "cms")), rules.AuthTokenMissing, challenge)
	check(h.post(t, "newsroom", "not.a.jwt", snapshot("", "s", 1, "cms")), rules.AuthTokenInvalid,
		challenge+`, error="invalid_token", error_description="the token is malformed or badly signed"`)
	pull := func(token string) answer {
		req, _ := http.NewRequest(http.MethodGet, h.http.URL+"/v1/tenants/newsroom/consumers/desk/messages?wait=0s", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return h.do(t, req)
	}
	check(pull(""), rules.AuthTokenMissing, challenge)
	h.clock.Advance(time.Hour + time.Minute)
	check(pull(tok), rules.AuthTokenExpired, challenge+`, error="invalid_token", error_description="the token has expired"`)
	check(h.post(t, "newsroom", tok, snapshot("", "s", 1, "cms")), rules.AuthTokenExpired,
		challenge+`, error="invalid_token", error_description="the token has expired"`)
}
