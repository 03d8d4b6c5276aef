package policy_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/policy"
)

var update = flag.Bool("update", false, "add new built-ins to testdata/tenant-builtins.tsv as UNREVIEWED")

// probe is a workspace module whose deny rule evaluates call.
func probe(call string) config.PolicyModule {
	return config.PolicyModule{Name: "probe", Rego: `package storybus.tenant.probe

deny contains {"rule": "tenant.probe", "message": sprintf("%v", [x])} if {
	x := ` + call + `
}
`, Rules: []config.TenantRule{{ID: "tenant.probe", Status: 403, Meaning: "m", Fix: "f"}}}
}

// TestRefusedBuiltins proves each built-in that reaches outside the bus, or
// makes a decision vary between retries, is a compile error naming the
// module and the built-in.
func TestRefusedBuiltins(t *testing.T) {
	for builtin, call := range map[string]string{
		"http.send":            `http.send({"method": "GET", "url": "http://127.0.0.1:1/"})`,
		"net.lookup_ip_addr":   `net.lookup_ip_addr("example.com")`,
		"net.cidr_contains":    `net.cidr_contains("10.0.0.0/8", "10.1.2.3")`,
		"opa.runtime":          `opa.runtime()`,
		"trace":                `trace("note")`,
		"rand.intn":            `rand.intn("seed", 10)`,
		"uuid.rfc4122":         `uuid.rfc4122("seed")`,
		"time.now_ns":          `time.now_ns()`,
		"io.jwt.verify_hs256":  `io.jwt.verify_hs256(input.message.doc.token, "key")`,
		"io.jwt.verify_rs256":  `io.jwt.verify_rs256(input.message.doc.token, "key")`,
		"io.jwt.decode_verify": `io.jwt.decode_verify(input.message.doc.token, {"secret": "key"})`,
		"io.jwt.encode_sign":   `io.jwt.encode_sign({"alg": "HS256"}, {}, {"kty": "oct", "k": "a2V5"})`,
		"json.verify_schema":   `json.verify_schema({"$ref": "http://127.0.0.1:1/schema.json"})`,
		"json.match_schema":    `json.match_schema({}, {"$ref": "http://127.0.0.1:1/schema.json"})`,
		"crypto.x509.parse_and_verify_certificates": `crypto.x509.parse_and_verify_certificates(input.message.doc.pem)`,
	} {
		t.Run(builtin, func(t *testing.T) {
			err := policy.CheckModules([]config.PolicyModule{probe(call)})
			if !errors.Is(err, policy.ErrCompile) {
				t.Fatalf("CheckModules: %v", err)
			}
			var be *policy.BuiltinError
			if !errors.As(err, &be) || be.Module != "probe" || be.Builtin != builtin || be.Row != 4 {
				t.Fatalf("error %v (%#v), want built-in %s of module probe at line 4", err, be, builtin)
			}
			if msg := err.Error(); !strings.Contains(msg, "workspace module probe") || !strings.Contains(msg, builtin) {
				t.Fatalf("message %q does not name the module and the built-in", msg)
			}
		})
	}
	// The probe itself compiles with a pure built-in.
	if err := policy.CheckModules([]config.PolicyModule{probe(`count(input.message.doc)`)}); err != nil {
		t.Fatalf("a pure built-in is refused: %v", err)
	}
}

// TestHTTPSendIsRefusedAndSendsNothing proves a workspace module that would
// send each message to a listener is refused, both by a new engine and by a
// reload (which keeps the previous policy), and nothing reaches the listener.
func TestHTTPSendIsRefusedAndSendsNothing(t *testing.T) {
	var hits atomic.Int64
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
	}))
	defer listener.Close()
	exfil := probe(`http.send({"method": "POST", "url": "` + listener.URL + `", "body": input.message.doc})`)

	w := workspace()
	w.Policies = []config.PolicyModule{exfil}
	var be *policy.BuiltinError
	if _, err := policy.New(context.Background(), w); !errors.As(err, &be) || be.Builtin != "http.send" {
		t.Fatalf("New: %v", err)
	}

	w = workspace()
	w.Policies = []config.PolicyModule{tenantModule()}
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	bad := workspace()
	bad.Policies = []config.PolicyModule{tenantModule(), exfil}
	if err := e.Update(context.Background(), bad); !errors.As(err, &be) || be.Module != "probe" {
		t.Fatalf("Update: %v", err)
	}
	for range 3 {
		d, err := e.Publish(context.Background(), message("obituaries", "A long enough headline"), policy.HeadInput{})
		if err != nil || len(d.Refusals) != 1 || d.Refusals[0].Rule != "tenant.no_obituaries" {
			t.Fatalf("the previous policy is not in force: %+v %v", d, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the listener received %d requests", n)
	}
}

// TestTenantBuiltinsReviewed pins the built-ins workspace modules may call
// and the review of each, so that an OPA upgrade adding built-ins fails
// here until someone has reviewed each new one for its effects (pure: no
// network, clock, randomness, secrets) and its cost in one call (linear or
// n log n in its arguments, or guarded: estimated before it runs, see
// cost.go). -update adds new built-ins as UNREVIEWED and drops removed ones;
// the test fails until each row is filled in.
func TestTenantBuiltinsReviewed(t *testing.T) {
	const golden = "testdata/tenant-builtins.tsv"
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	reviewed := map[string][2]string{}
	header := ""
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(line, "#") {
			header = line
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 3 {
			t.Fatalf("%s: %q: want three tab-separated columns", golden, line)
		}
		reviewed[cols[0]] = [2]string{cols[1], cols[2]}
	}
	allowed := policy.TenantBuiltins()
	if *update {
		var out strings.Builder
		out.WriteString(header + "\n")
		next := map[string][2]string{}
		for _, name := range allowed {
			r, ok := reviewed[name]
			if !ok {
				r = [2]string{"UNREVIEWED", "UNREVIEWED"}
			}
			next[name] = r
			fmt.Fprintf(&out, "%s\t%s\t%s\n", name, r[0], r[1])
		}
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		reviewed = next
	}
	if len(allowed) != len(reviewed) {
		t.Errorf("%d built-ins allowed, %d reviewed in %s: run go test ./policy/ -run TestTenantBuiltinsReviewed -update, then review the new rows", len(allowed), len(reviewed), golden)
	}
	for _, name := range allowed {
		r, ok := reviewed[name]
		switch {
		case !ok:
			t.Errorf("built-in %s is allowed but not reviewed in %s", name, golden)
		case r[0] != "pure":
			t.Errorf("built-in %s: effects %q, want pure (or refuse it in sandbox.go)", name, r[0])
		case r[1] == "guarded" != policy.Guarded(name):
			t.Errorf("built-in %s: cost %q, but guarded in cost.go is %v", name, r[1], policy.Guarded(name))
		case !slices.Contains([]string{"linear", "n log n", "size × depth, charged", "guarded"}, r[1]):
			t.Errorf("built-in %s: cost %q is not a reviewed class (refuse it in sandbox.go if unbounded)", name, r[1])
		}
	}
	set := map[string]bool{}
	for _, name := range allowed {
		set[name] = true
	}
	if len(set) < 100 || !set["sprintf"] || !set["regex.match"] || !set["numbers.range"] {
		t.Fatalf("the pure built-ins are missing: %d allowed", len(set))
	}
	for _, b := range ast.CapabilitiesForThisVersion().Builtins {
		if b.Nondeterministic && set[b.Name] {
			t.Errorf("non-deterministic built-in %s is allowed", b.Name)
		}
	}
}

// slowModule denies after a comprehension over ten billion pairs: without
// a deadline it never finishes.
func slowModule() config.PolicyModule {
	return config.PolicyModule{Name: "slow", Rego: `package storybus.tenant.slow

deny contains {"rule": "tenant.slow", "message": "unreachable"} if {
	count([p | some i in numbers.range(1, 100000); some j in numbers.range(1, 100000); p := i * j]) < 0
}
`, Rules: []config.TenantRule{{ID: "tenant.slow", Status: 409, Meaning: "m", Fix: "f"}}}
}

// TestSlowModuleHitsTheDeadline proves a workspace module that would run for
// hours is stopped at the workspace's deadline with ErrTimeout, and the
// bus's own evaluations are unaffected.
func TestSlowModuleHitsTheDeadline(t *testing.T) {
	w := workspace()
	w.Policies = []config.PolicyModule{slowModule()}
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := e.Publish(context.Background(), message("local", "A long enough headline"), policy.HeadInput{}); !errors.Is(err, policy.ErrTimeout) {
			t.Fatalf("Publish: %v", err)
		}
	}
	if r, err := e.Grants(context.Background(), message("local", "A long enough headline")); err != nil || r != nil {
		t.Fatalf("Grants: %v %v", r, err)
	}
	// A caller's own cancellation is not a policy timeout.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Publish(ctx, message("local", "A long enough headline"), policy.HeadInput{}); err == nil || errors.Is(err, policy.ErrTimeout) {
		t.Fatalf("Publish with a cancelled context: %v", err)
	}
}

func TestPolicyTimeoutIsValidated(t *testing.T) {
	for _, d := range []string{"500us", "2s"} {
		w := workspace()
		if err := w.PolicyTimeout.UnmarshalJSON([]byte(`"` + d + `"`)); err != nil {
			t.Fatal(err)
		}
		if err := w.Validate(); err == nil || !strings.Contains(err.Error(), "policyTimeout") {
			t.Fatalf("policyTimeout %s: %v", d, err)
		}
	}
}
