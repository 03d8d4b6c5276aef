package policy_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/policy"
)

func workspace() *config.Workspace {
	w := &config.Workspace{
		ID:         "newsroom",
		SigningKey: "0123456789abcdef0123456789abcdef",
		Connections: []config.Connection{{Name: "cms", Grant: config.Grant{Publish: config.PublishGrant{
			SystemIDs: []string{"cms"}, MessageTypes: []string{"*"}}}}},
	}
	w.Default()
	return w
}

const noObituaries = `package storybus.tenant.desk

deny contains {"rule": "tenant.no_obituaries", "message": "obituaries go through the obituary desk", "path": "/payload/desk"} if {
	input.message.doc.payload.desk == "obituaries"
}

warn contains {"rule": "tenant.short_headline", "message": "headline is very short"} if {
	count(input.message.doc.payload.headline) < 10
}
`

func tenantModule() config.PolicyModule {
	return config.PolicyModule{Name: "desk", Rego: noObituaries, Rules: []config.TenantRule{
		{ID: "tenant.no_obituaries", Status: 409, Meaning: "m", Fix: "f"},
		{ID: "tenant.short_headline", Meaning: "m", Fix: "f"},
	}}
}

func message(desk, headline string) policy.MessageInput {
	return policy.MessageInput{
		Connection: "cms", MessageType: "story.context", Family: "story-context", SystemID: "cms", StoryID: "s1",
		Doc: map[string]any{"payload": map[string]any{"desk": desk, "headline": headline}},
	}
}

func TestTenantRules(t *testing.T) {
	w := workspace()
	w.Policies = []config.PolicyModule{tenantModule()}
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.Publish(context.Background(), message("obituaries", "Short"), policy.HeadInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Refusals) != 1 || d.Refusals[0].Rule != "tenant.no_obituaries" || d.Refusals[0].Path != "/payload/desk" {
		t.Fatalf("decision %+v", d)
	}
	if len(d.Warnings) != 1 || d.Warnings[0].Rule != "tenant.short_headline" {
		t.Fatalf("warnings %+v", d.Warnings)
	}
	d, err = e.Publish(context.Background(), message("local", "A long enough headline"), policy.HeadInput{})
	if err != nil || len(d.Refusals)+len(d.Warnings) != 0 || d.Owner != "cms" {
		t.Fatalf("decision %+v %v", d, err)
	}
}

func TestModuleThatDoesNotCompileKeepsThePreviousPolicy(t *testing.T) {
	w := workspace()
	w.Policies = []config.PolicyModule{tenantModule()}
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	for name, broken := range map[string]config.PolicyModule{
		"syntax":        {Name: "desk", Rego: "package storybus.tenant.desk\ndeny contains x if {"},
		"wrong package": {Name: "desk", Rego: "package storybus.access\nrefusal := 1"},
		"unsafe":        {Name: "desk", Rego: "package storybus.tenant.desk\ndeny contains x if { y := 1 }"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := workspace()
			bad.Policies = []config.PolicyModule{broken}
			err := e.Update(context.Background(), bad)
			if !errors.Is(err, policy.ErrCompile) {
				t.Fatalf("Update: %v", err)
			}
			d, err := e.Publish(context.Background(), message("obituaries", "A long enough headline"), policy.HeadInput{})
			if err != nil || len(d.Refusals) != 1 {
				t.Fatalf("the previous policy is not in force: %+v %v", d, err)
			}
		})
	}
}

func TestDataIsUpdatedInPlace(t *testing.T) {
	w := workspace()
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	in := message("local", "A long enough headline")
	in.MessageType = "story.event"
	if r, err := e.Grants(context.Background(), in); err != nil || r != nil {
		t.Fatalf("granted: %v %v", r, err)
	}
	w2 := workspace()
	w2.Connections[0].Grant.Publish.MessageTypes = []string{"story.context"}
	if err := e.Update(context.Background(), w2); err != nil {
		t.Fatal(err)
	}
	if r, err := e.Grants(context.Background(), in); err != nil || r == nil || r.Rule != "grant.message_type" {
		t.Fatalf("after the grant changed: %v %v", r, err)
	}
}

func TestUndeclaredTenantRuleIsAnError(t *testing.T) {
	w := workspace()
	m := tenantModule()
	m.Rules = m.Rules[1:] // tenant.no_obituaries no longer declared
	w.Policies = []config.PolicyModule{m}
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(context.Background(), message("obituaries", "A long enough headline"), policy.HeadInput{}); !errors.Is(err, policy.ErrUndeclaredRule) {
		t.Fatalf("err %v", err)
	}
}

func BenchmarkGate(b *testing.B) {
	e, err := policy.New(context.Background(), workspace())
	if err != nil {
		b.Fatal(err)
	}
	in := policy.GateInput{Connection: "cms", ClientIP: "127.0.0.1", MediaType: "application/json", JSONDepth: 3}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Gate(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGrants(b *testing.B) {
	e, err := policy.New(context.Background(), workspace())
	if err != nil {
		b.Fatal(err)
	}
	in := message("local", "A long enough headline")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Grants(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPublishDecision(b *testing.B) {
	e, err := policy.New(context.Background(), workspace())
	if err != nil {
		b.Fatal(err)
	}
	in := message("local", "A long enough headline")
	b.Run("evaluated", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			// A new head owner is a new input: no memoised decision.
			if _, err := e.Publish(context.Background(), in, policy.HeadInput{Exists: true, Owner: "sys-" + strconv.Itoa(i)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memoised", func(b *testing.B) {
		b.ReportAllocs()
		in.StoryID = "story-0"
		for b.Loop() {
			if _, err := e.Publish(context.Background(), in, policy.HeadInput{Exists: true, Owner: "cms"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestMemoisedDecisionsFollowConfiguration(t *testing.T) {
	w := workspace()
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	in := message("local", "A long enough headline")
	in.SystemID = "wire"
	head := policy.HeadInput{Exists: true, Owner: "cms"}
	for range 2 { // evaluated, then memoised
		d, err := e.Publish(context.Background(), in, head)
		if err != nil || len(d.Warnings) != 1 || len(d.Refusals) != 0 {
			t.Fatalf("tolerate: %+v %v", d, err)
		}
	}
	w2 := workspace()
	w2.Ownership.NotOwner = config.NotOwnerRefuse
	if err := e.Update(context.Background(), w2); err != nil {
		t.Fatal(err)
	}
	d, err := e.Publish(context.Background(), in, head)
	if err != nil || len(d.Refusals) != 1 || d.Refusals[0].Rule != "story.not_owner" {
		t.Fatalf("after the change the memoised decision was kept: %+v %v", d, err)
	}
}

// Without owner rules, hand-offs or workspace modules a story's id cannot
// change stage 12's decision, so one memoised decision serves every story;
// a hand-off makes the id matter again.
func TestStoryIndependentDecisions(t *testing.T) {
	w := workspace()
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	head := policy.HeadInput{Exists: true, Owner: "cms"}
	decide := func(story string) policy.Decision {
		t.Helper()
		in := message("local", "A long enough headline")
		in.SystemID, in.StoryID = "wire", story
		d, err := e.Publish(context.Background(), in, head)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, story := range []string{"s1", "s2"} {
		if d := decide(story); len(d.Warnings) != 1 || d.Warnings[0].Rule != "story.not_owner" || d.Owner != "cms" {
			t.Fatalf("%s: %+v", story, d)
		}
	}
	w2 := workspace()
	w2.Ownership.Handoffs = []config.Handoff{{StoryID: "s2", ToSystemID: "wire"}}
	if err := e.Update(context.Background(), w2); err != nil {
		t.Fatal(err)
	}
	if d := decide("s2"); len(d.Warnings) != 0 || d.Owner != "wire" {
		t.Fatalf("handed-off story: %+v", d)
	}
	if d := decide("s1"); len(d.Warnings) != 1 || d.Owner != "cms" {
		t.Fatalf("other story after the hand-off: %+v", d)
	}
}

// The token route's connection check: an inactive connection is refused;
// an IAM role still to be verified is no reason to refuse a bearer token.
func TestAccess(t *testing.T) {
	w := workspace()
	w.Connections = append(w.Connections, config.Connection{Name: "old", Active: new(false)},
		config.Connection{Name: "aws", IAM: &config.IAM{AccessKeyID: "AKIDEXAMPLE"}})
	w.Default()
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	for conn, want := range map[string]string{"cms": "", "aws": "", "old": "connection.inactive"} {
		v, err := e.Access(context.Background(), conn)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if v != nil {
			got = v.Rule
		}
		if got != want {
			t.Errorf("%s: refused with %q, want %q", conn, got, want)
		}
	}
}

// A workspace module may warn with a catalogued warning, but not refuse
// with one: a rule without a status would become a 503 retried forever.
func TestTenantModuleCannotRefuseWithAWarning(t *testing.T) {
	w := workspace()
	w.Policies = []config.PolicyModule{{Name: "gaps", Rego: `package storybus.tenant.gaps

deny contains {"rule": "sequence.gap", "message": "no gaps here"} if {
	input.message.doc.payload.desk == "gaps"
}

warn contains {"rule": "sequence.gap", "message": "a gap, noted"} if {
	input.message.doc.payload.desk == "noted"
}
`}}
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(context.Background(), message("gaps", "A long enough headline"), policy.HeadInput{}); !errors.Is(err, policy.ErrUndeclaredRule) {
		t.Fatalf("refusal with a warning rule: err %v", err)
	}
	d, err := e.Publish(context.Background(), message("noted", "A long enough headline"), policy.HeadInput{})
	if err != nil || len(d.Refusals) != 0 || len(d.Warnings) != 1 || d.Warnings[0].Rule != "sequence.gap" {
		t.Fatalf("warning: %+v %v", d, err)
	}
}
