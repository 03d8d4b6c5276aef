package bench

import (
	"strings"
	"testing"

	"github.com/storybus/storybus/client"
)

// TestSplitWorkspaceURL takes the bus's base URL and the workspace from a
// workspace URL, and refuses anything else.
func TestSplitWorkspaceURL(t *testing.T) {
	for _, c := range []struct{ url, base, ws string }{
		{"https://bus.example/v1/tenants/newsroom", "https://bus.example", "newsroom"},
		{"https://bus.example/v1/tenants/newsroom/", "https://bus.example", "newsroom"},
		{"http://127.0.0.1:8080/v1/tenants/ws-1", "http://127.0.0.1:8080", "ws-1"},
		{"https://gw.example/storybus/v1/tenants/newsroom", "https://gw.example/storybus", "newsroom"},
	} {
		base, ws, err := SplitWorkspaceURL(c.url)
		if err != nil || base != c.base || ws != c.ws {
			t.Errorf("SplitWorkspaceURL(%q) = %q, %q, %v; want %q, %q", c.url, base, ws, err, c.base, c.ws)
		}
	}
	for _, bad := range []string{"", "bus.example/v1/tenants/newsroom", "ftp://bus.example/v1/tenants/newsroom",
		"https://bus.example", "https://bus.example/v1/tenants/", "https://bus.example/v1/tenants/newsroom/messages",
		"https://bus.example/v1/tenants/newsroom?x=1", "https:///v1/tenants/newsroom"} {
		if base, ws, err := SplitWorkspaceURL(bad); err == nil {
			t.Errorf("SplitWorkspaceURL(%q) = %q, %q; want an error", bad, base, ws)
		}
	}
}

// TestValidateNamesEveryProblem: one error names each problem, for the
// embedded bus and for a running one.
func TestValidateNamesEveryProblem(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	o.Producers = []int{4, 0}
	o.Phases = []PhaseName{PhaseBus, "relay-three-write"}
	o.Sync = "never"
	o.BusReplicas = 3
	err := o.Validate()
	for _, want := range []string{"producers must be at least 1, not 0", `unknown phase "relay-three-write"`, `sync must be always or interval, not "never"`,
		"several bus replicas need a cluster"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to name %q", err, want)
		}
	}

	o = DefaultOptions()
	o.Producers = nil
	o.Remote = &Remote{URL: "https://bus.example/v1/tenants"}
	o.Phases = []PhaseName{PhaseBus, PhaseRelay}
	err = o.Validate()
	for _, want := range []string{"producers must list at least one level", "want http(s)://host/v1/tenants/<workspace>",
		"needs a token or client credentials", "needs the system_id", "no baseline phases"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to name %q", err, want)
		}
	}

	o = DefaultOptions()
	o.Sync = ""
	o.Remote = &Remote{URL: "https://bus.example/v1/tenants/newsroom", Tokens: client.StaticToken("t"), SystemID: "cms"}
	if err := o.Validate(); err != nil {
		t.Errorf("a running bus, no sync mode: %v", err)
	}
	if got := o.phases(); len(got) != 1 || got[0] != PhaseBus {
		t.Errorf("the phases against a running bus: %v; want the bus alone", got)
	}
}
