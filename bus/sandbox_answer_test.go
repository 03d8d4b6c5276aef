package bus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// sandboxHarness is the harness with workspace "newsroom" a sandbox: cms
// limited to one accepted message a day, wire to one request a second.
func sandboxHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	cfg := workspaceConfig("newsroom")
	cfg.Sandbox = true
	cfg.Connections[0].Limits = &config.Limits{DailyQuota: 1}
	cfg.Connections[1].Limits = &config.Limits{RatePerSecond: 1, Burst: 1}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return h
}

// postAnswer publishes body to the workspace with the token, asking for
// the answer in the Storybus-Sandbox-Answer header.
func (h *harness) postAnswer(t *testing.T, ws, token string, body []byte, want ...string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/"+ws+"/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for _, w := range want {
		req.Header.Add(bus.SandboxAnswerHeader, w)
	}
	return h.do(t, req)
}

// topicMessages counts the messages on the workspace's topic.
func (h *harness) topicMessages(t *testing.T, ws string) uint64 {
	t.Helper()
	st, err := store.Connect(store.Options{Embedded: h.ns})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	topic, err := st.JS.Stream(context.Background(), store.StreamName(ws))
	if err != nil {
		t.Fatal(err)
	}
	info, err := topic.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// sameAnswer fails unless the sandbox's answer is the real one's: status,
// the body's members, the first violation's rule, source and path, the
// Content-Type, and Retry-After within slack seconds (both are measured
// from the moment each answer is made).
func sameAnswer(t *testing.T, real, sandbox answer, slack int) {
	t.Helper()
	if sandbox.Status != real.Status || sandbox.rule() != real.rule() {
		t.Fatalf("sandbox %d %s, real %d %s", sandbox.Status, sandbox.Raw, real.Status, real.Raw)
	}
	keys := func(a answer) []string {
		var ks []string
		for k := range a.Raw {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	if !slices.Equal(keys(real), keys(sandbox)) {
		t.Fatalf("sandbox members %v, real %v", keys(sandbox), keys(real))
	}
	rv, sv := real.Violations[0], sandbox.Violations[0]
	if sv.Source != rv.Source || sv.Path != rv.Path {
		t.Fatalf("sandbox %+v, real %+v", sv, rv)
	}
	if sandbox.Header.Get("Content-Type") != real.Header.Get("Content-Type") {
		t.Fatalf("sandbox Content-Type %q, real %q", sandbox.Header.Get("Content-Type"), real.Header.Get("Content-Type"))
	}
	rr, sr := real.Header.Get("Retry-After"), sandbox.Header.Get("Retry-After")
	if (rr == "") != (sr == "") {
		t.Fatalf("sandbox Retry-After %q, real %q", sr, rr)
	}
	if rr != "" {
		ri, err1 := strconv.Atoi(rr)
		si, err2 := strconv.Atoi(sr)
		if err1 != nil || err2 != nil || si < ri-slack || si > ri+slack {
			t.Fatalf("sandbox Retry-After %q, real %q", sr, rr)
		}
	}
}

// TestSandboxAnswersAsTheBusDoes provokes refusals for real and compares
// each with the sandbox's answer for its rule, which records and publishes
// nothing: the same message published afterwards is accepted, once.
func TestSandboxAnswersAsTheBusDoes(t *testing.T) {
	h := sandboxHarness(t)
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	wire := h.token(t, "newsroom", "wire", wireSecret)
	sandbox := func(tok, rule string) answer {
		t.Helper()
		return h.postAnswer(t, "newsroom", tok, snapshot("", "sandboxed", 1, "cms"), rule)
	}

	// The quota: one accepted message a day.
	first := snapshot("", "story-1", 1, "cms")
	expect(t, h.post(t, "newsroom", cms, first), http.StatusAccepted, "")
	real := h.post(t, "newsroom", cms, snapshot("", "story-2", 1, "cms"))
	expect(t, real, http.StatusTooManyRequests, rules.QuotaExceeded)
	sameAnswer(t, real, sandbox(cms, rules.QuotaExceeded), 60)

	// The rate: one request a second, and no clock moves here.
	expect(t, h.post(t, "newsroom", wire, snapshot("", "story-w", 1, "wire")), http.StatusAccepted, "")
	real = h.post(t, "newsroom", wire, snapshot("", "story-w", 2, "wire"))
	expect(t, real, http.StatusTooManyRequests, rules.RateLimited)
	sameAnswer(t, real, sandbox(wire, rules.RateLimited), 0)

	// SOM: a malformed message_id, a stale snapshot and a reused
	// message_id (the other workspace has no quota to answer first).
	other := h.token(t, "other", "cms", cmsSecret)
	real = h.post(t, "other", other, snapshot("not-a-uuid", "story-1", 1, "cms"))
	expect(t, real, http.StatusBadRequest, "envelope.format.uuid")
	sameAnswer(t, real, sandbox(wire, "envelope.format.uuid"), 0)
	accepted := snapshot("", "story-1", 1, "cms")
	expect(t, h.post(t, "other", other, accepted), http.StatusAccepted, "")
	real = h.post(t, "other", other, snapshot("", "story-1", 1, "cms"))
	expect(t, real, http.StatusConflict, rules.SequenceStale)
	sameAnswer(t, real, sandbox(wire, rules.SequenceStale), 0)
	real = h.post(t, "other", other, bytes.Replace(accepted, []byte("Harbour"), []byte("Harbor"), 1))
	expect(t, real, http.StatusConflict, rules.MessageIDReused)
	sameAnswer(t, real, sandbox(wire, rules.MessageIDReused), 0)

	// The publish core: a failed publish, and a retry while the first
	// attempt is in flight.
	failed, stopped := uuid.NewString(), uuid.NewString()
	faults := publish.Faults(func(_ context.Context, p publish.FaultPoint, id string) error {
		switch {
		case p == publish.FaultPublish && id == failed:
			return context.DeadlineExceeded
		case p == publish.FaultAfterRecord && id == stopped:
			return publish.ErrStop
		}
		return nil
	})
	h.faults.Store(&faults)
	real = h.post(t, "other", other, snapshot(failed, "story-f", 1, "cms"))
	expect(t, real, http.StatusServiceUnavailable, rules.BusPublishFailed)
	sameAnswer(t, real, sandbox(wire, rules.BusPublishFailed), 0)
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/other/messages", bytes.NewReader(snapshot(stopped, "story-s", 1, "cms")))
	req.Header.Set("Authorization", "Bearer "+other)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("a stopped publish answered %d", res.StatusCode)
	}
	h.faults.Store(nil)
	real = h.post(t, "other", other, snapshot(stopped, "story-s", 1, "cms"))
	expect(t, real, http.StatusServiceUnavailable, rules.MessageInFlight)
	sameAnswer(t, real, sandbox(wire, rules.MessageInFlight), 10)

	// Nothing was recorded or published by the sandbox's answers: the
	// message they carried is accepted now, once.
	before := h.topicMessages(t, "newsroom")
	h.clock.Advance(time.Second) // the wire connection's next request
	expect(t, h.post(t, "newsroom", wire, snapshot("", "sandboxed", 1, "wire")), http.StatusAccepted, "")
	if after := h.topicMessages(t, "newsroom"); after != before+1 {
		t.Fatalf("topic went from %d to %d messages", before, after)
	}
}

// notPublishAnswers are the rules only the token and consumer routes, or a
// sandbox's own header handling, answer with.
var notPublishAnswers = []string{
	rules.AuthCredentialsInvalid, rules.AuthAttemptsExceeded,
	rules.AuthRequestInvalid, rules.AuthGrantUnsupported, rules.AuthScopeInvalid,
	rules.ConsumerRequestInvalid, rules.ConsumerAckInvalid, rules.GrantFamily,
	rules.ConsumerNameTaken, rules.ConsumerLimitReached,
	rules.SandboxNotEnabled, rules.SandboxAnswerUnknown,
}

// TestSandboxProvokesEveryRefusal asks a sandbox for every catalogued
// refusal of the publish routes, and a workspace rule: each is answered in
// the refusal shape with its catalogued (or declared) status and source,
// Retry-After on 429 and 503 (decode checks these), and a path where the
// bus's own answer always names one. Nothing reaches the topic.
func TestSandboxProvokesEveryRefusal(t *testing.T) {
	h := sandboxHarness(t)
	cfg := workspaceConfig("newsroom")
	cfg.Sandbox = true
	cfg.Policies = []config.PolicyModule{{Name: "desk", Rego: "package storybus.tenant.desk\n",
		Rules: []config.TenantRule{{ID: "tenant.desk_closed", Status: 403, Meaning: "m", Fix: "f"}}}}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	body := snapshot("", "story-1", 1, "cms")
	paths := map[string]string{
		rules.MessageIDReused:  "/message_id",
		rules.SequenceStale:    "/payload/sequence_number",
		rules.CommitContention: "/payload/story_id",
		rules.StoryNotOwner:    "/system_id",
		"envelope.format.uuid": "/message_id",
	}
	provoked := 0
	for _, r := range rules.All() {
		if r.Status == 0 || slices.Contains(notPublishAnswers, r.ID) {
			continue
		}
		provoked++
		a := h.postAnswer(t, "newsroom", tok, body, r.ID)
		expect(t, a, r.Status, r.ID)
		if want, ok := paths[r.ID]; ok && a.Violations[0].Path != want {
			t.Errorf("%s: path %q, want %q", r.ID, a.Violations[0].Path, want)
		}
		if r.Source == rules.SourceSchema && a.Violations[0].Path == "" && !strings.HasPrefix(r.ID, "envelope.") {
			t.Errorf("%s: no path", r.ID)
		}
	}
	if provoked < 50 {
		t.Fatalf("only %d rules provoked", provoked)
	}
	res := h.postRaw(t, "newsroom", tok, body, "tenant.desk_closed")
	if res.Status != http.StatusForbidden || res.rule() != "tenant.desk_closed" || res.Violations[0].Source != rules.SourcePolicy {
		t.Fatalf("workspace rule: %d %s", res.Status, res.Raw)
	}
	if n := h.topicMessages(t, "newsroom"); n != 0 {
		t.Fatalf("%d messages on the topic", n)
	}
	expect(t, h.post(t, "newsroom", tok, body), http.StatusAccepted, "")
}

// postRaw is postAnswer without the shape check, whose catalogue knows
// no workspace rule's status (the workspace declares it).
func (h *harness) postRaw(t *testing.T, ws, token string, body []byte, want string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/"+ws+"/messages", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(bus.SandboxAnswerHeader, want)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{Status: res.StatusCode, Header: res.Header}
	if err := json.Unmarshal(raw, &a.Raw); err != nil {
		t.Fatalf("%d: %s", res.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestSandboxRefusesWhatIsNoAnswer proves a header naming no answer of the
// publish routes is a 400 sandbox.answer_unknown, and nothing is published.
func TestSandboxRefusesWhatIsNoAnswer(t *testing.T) {
	h := sandboxHarness(t)
	tok := h.token(t, "newsroom", "wire", wireSecret)
	body := snapshot("", "story-1", 1, "wire")
	for _, want := range [][]string{
		{"no.such.rule"}, {""}, {rules.SequenceGap}, {rules.GrantFamily}, {rules.AuthCredentialsInvalid},
		{rules.SandboxNotEnabled}, {"tenant.unknown"}, {rules.RateLimited, rules.QuotaExceeded},
	} {
		a := h.postAnswer(t, "newsroom", tok, body, want...)
		expect(t, a, http.StatusBadRequest, rules.SandboxAnswerUnknown)
		if want[0] != "" && len(want) == 1 && !strings.Contains(a.Violations[0].Message, want[0]) {
			t.Errorf("%q: the message does not name it: %s", want, a.Violations[0].Message)
		}
	}
	if n := h.topicMessages(t, "newsroom"); n != 0 {
		t.Fatalf("%d messages on the topic", n)
	}
}

// TestSandboxHeaderOutsideASandbox proves a workspace that is not a
// sandbox refuses the header with 400 sandbox.not_enabled and publishes
// nothing, and that authentication comes first on both kinds.
func TestSandboxHeaderOutsideASandbox(t *testing.T) {
	h := sandboxHarness(t)
	tok := h.token(t, "other", "cms", cmsSecret)
	body := snapshot("", "story-1", 1, "cms")
	for _, want := range []string{rules.RateLimited, bus.SandboxLost, "no.such.rule"} {
		expect(t, h.postAnswer(t, "other", tok, body, want), http.StatusBadRequest, rules.SandboxNotEnabled)
	}
	if n := h.topicMessages(t, "other"); n != 0 {
		t.Fatalf("%d messages on the topic", n)
	}
	expect(t, h.post(t, "other", tok, body), http.StatusAccepted, "")

	for _, ws := range []string{"other", "newsroom"} {
		expect(t, h.postAnswer(t, ws, "not-a-token", body, rules.RateLimited), http.StatusUnauthorized, rules.AuthTokenInvalid)
	}
	expect(t, h.postAnswer(t, "newsroom", tok, body, rules.RateLimited), http.StatusForbidden, rules.WorkspaceMismatch)
}

// TestSandboxLostAnswer proves "lost" publishes the message and drops the
// connection without an answer, over a real HTTP connection, and that the
// producer's identical retry gets 200 duplicate with nothing published
// twice.
func TestSandboxLostAnswer(t *testing.T) {
	h := sandboxHarness(t)
	tok := h.token(t, "newsroom", "wire", wireSecret)
	body := snapshot("", "story-lost", 1, "wire")
	send := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set(bus.SandboxAnswerHeader, bus.SandboxLost)
		return http.DefaultClient.Do(req)
	}
	if res, err := send(); err == nil {
		res.Body.Close()
		t.Fatalf("a lost answer arrived: %d", res.StatusCode)
	}
	if n := h.topicMessages(t, "newsroom"); n != 1 {
		t.Fatalf("%d messages on the topic after the lost answer", n)
	}
	h.clock.Advance(time.Second) // the connection's next request
	res, err := send()
	if err != nil {
		t.Fatal(err)
	}
	a := decode(t, res)
	if a.Status != http.StatusOK || !a.Duplicate {
		t.Fatalf("the retry got %d %s", a.Status, a.Raw)
	}
	if n := h.topicMessages(t, "newsroom"); n != 1 {
		t.Fatalf("%d messages on the topic after the retry", n)
	}
	if m := h.metrics(t); !strings.Contains(m, `storybus_publish_requests_total{rule="",status="aborted",workspace="newsroom"} 1`) {
		t.Fatalf("the lost answer is not counted as aborted:\n%s", m)
	}
}

// TestSandboxOnTheIAMRoute proves the AWS-signed route takes the header
// too: a bad signature is API Gateway's 403 first, a good one gets the
// provoked answer, and a workspace that is not a sandbox refuses it.
func TestSandboxOnTheIAMRoute(t *testing.T) {
	h := newIAMHarness(t)
	body := snapshot("", "iam-story", 1, "cms")
	signed := func(secret, want string) answer {
		t.Helper()
		req := h.signed(t, "newsroom", cmsAccessKey, secret, bus.IAMService, body, h.clock.Now())
		req.Header.Set(bus.SandboxAnswerHeader, want)
		return h.do(t, req)
	}
	expect(t, signed(cmsSecretKey, rules.BusPublishFailed), http.StatusBadRequest, rules.SandboxNotEnabled)

	cfg := iamConfig()
	cfg.Sandbox = true
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if a := signed(cmsSecretKey+"x", rules.BusPublishFailed); a.Status != http.StatusForbidden || a.Message == "" {
		t.Fatalf("a bad signature got %d %s", a.Status, a.Raw)
	}
	a := signed(cmsSecretKey, rules.BusPublishFailed)
	expect(t, a, http.StatusServiceUnavailable, rules.BusPublishFailed)
	if a.Header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q", a.Header.Get("Retry-After"))
	}
	if n := h.topicMessages(t, "newsroom"); n != 0 {
		t.Fatalf("%d messages on the topic", n)
	}
}
