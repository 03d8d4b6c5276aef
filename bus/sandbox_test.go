package bus_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus/config"
	"github.com/storybus/storybus/bus/rules"
	"github.com/storybus/storybus/policy"
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
