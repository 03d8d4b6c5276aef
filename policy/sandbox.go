package policy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	config "github.com/storybus/storybus/api/config/v1alpha1"
)

// DefaultTimeout bounds one evaluation of the workspace's own modules when
// the workspace configuration sets no policyTimeout.
const DefaultTimeout = 100 * time.Millisecond

// DefaultConcurrency bounds the evaluations of one workspace's own modules
// that run at once, when the workspace configuration sets no
// policyConcurrency: half the bus's cores (GOMAXPROCS, which follows a
// container's CPU limit), at least one, so that one workspace's modules
// leave the other half to everything else. Measured on two cores, a
// workspace whose module runs to its deadline on every message moved a
// neighbour's p99 102 times at four, 14 times at one
// (BenchmarkNeighbourUnderFlood).
func DefaultConcurrency() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// ErrBusy is an evaluation of the workspace's own modules refused because
// as many as the workspace's policyConcurrency are already running: the
// producer is told to retry, and nothing waits in a queue.
var ErrBusy = errors.New("as many evaluations of the workspace's policy as it may run at once are running")

// ErrTimeout is an evaluation of the workspace's own modules that did not
// finish within the workspace's policy deadline. Nothing is decided, and
// nothing is memoised: the producer is told to retry.
var ErrTimeout = errors.New("workspace policy evaluation exceeded its deadline")

// BuiltinError is a workspace module that calls a built-in function the
// sandbox refuses. It is a compile error: the module is never loaded.
type BuiltinError struct {
	// Module is the workspace module's name.
	Module string
	// Builtin is the refused built-in, as the module calls it.
	Builtin string
	// Row is the line of the first call in the module's source.
	Row int
	// Why says what the built-in would do that a workspace may not.
	Why string
}

func (e *BuiltinError) Error() string {
	return fmt.Sprintf("workspace module %s, line %d: built-in %s is not allowed in workspace policies (%s)",
		e.Module, e.Row, e.Builtin, e.Why)
}

// Why a built-in is refused: its effects reach outside the bus or vary
// between retries, or its cost in one call cannot be bounded (OPA checks
// the deadline only between calls).
const (
	whyEffect = "no network, clock, randomness or tracing"
	whyCost   = "its cost in one call has no bound: it could hold the bus past the policy deadline or take its memory"
)

// refusedNames are the built-ins workspace modules may not call beyond
// those OPA itself flags as non-deterministic; a trailing * refuses every
// name with that prefix.
var refusedNames = []struct{ name, why string }{
	{"http.send", whyEffect},                                  // the network: exfiltration and SSRF from the publish path
	{"net.*", whyEffect},                                      // DNS look-ups; the CIDR helpers with them, by rule
	{"opa.runtime", whyEffect},                                // the process's environment and configuration
	{"trace", whyEffect},                                      // writes into the evaluation's trace
	{"rand.*", whyEffect},                                     // randomness
	{"uuid.rfc4122", whyEffect},                               // randomness
	{"time.now_ns", whyEffect},                                // the clock: a retry must get the same answer
	{"io.jwt.verify_*", whyEffect},                            // key material and key look-ups
	{"io.jwt.decode_verify", whyEffect},                       // key material and the clock
	{"io.jwt.encode_sign*", whyEffect},                        // signing keys; randomness in signatures
	{"json.verify_schema", whyEffect},                         // remote $ref look-ups
	{"json.match_schema", whyEffect},                          // remote $ref look-ups
	{"crypto.x509.parse_and_verify_certificates*", whyEffect}, // the clock

	{"strings.render_template", whyCost}, // text/template: loops of any length inside one call
	{"graph.reachable_paths", whyCost},   // every path of a graph: exponential in its size
	{"bits.lsh", whyCost},                // 1 << n allocates n bits at once
	{"graphql.*", whyCost},               // parsing and validation super-linear in crafted queries; no use on a bus
	{"regex.globs_match", whyCost},       // intersecting two patterns' automata: exponential
	{"rego.parse_module", whyCost},       // the Rego parser on a message: recursion as deep as the text
	{"yaml.unmarshal", whyCost},          // aliases expand a document many times over in one call
	{"yaml.is_valid", whyCost},           // the same decoder
}

// refusal says why workspace modules may not call the built-in, or "" if
// they may.
func refusal(b *ast.Builtin) string {
	if b.Nondeterministic {
		return whyEffect
	}
	for _, r := range refusedNames {
		if prefix, wildcard := strings.CutSuffix(r.name, "*"); wildcard {
			if strings.HasPrefix(b.Name, prefix) {
				return r.why
			}
		} else if b.Name == r.name {
			return r.why
		}
	}
	return ""
}

// TenantBuiltins returns the names of the built-in functions a workspace
// module may call, sorted: every built-in of this OPA version but those
// that reach outside the bus, make a decision vary between retries, or
// cost without bound in one call.
func TenantBuiltins() []string {
	var out []string
	for _, b := range ast.CapabilitiesForThisVersion().Builtins {
		if refusal(b) == "" {
			out = append(out, b.Name)
		}
	}
	slices.Sort(out)
	return out
}

// checkSandbox returns a BuiltinError for each refused built-in that a
// compiled workspace module calls, joined. It reads the compiled module, in
// which every call names its built-in or rule in full.
func checkSandbox(module string, m *ast.Module) error {
	var errs []error
	seen := map[string]bool{}
	ast.WalkTerms(m, func(t *ast.Term) bool {
		ref, ok := t.Value.(ast.Ref)
		if !ok {
			return false
		}
		name := ref.String()
		b, builtin := ast.BuiltinMap[name]
		if !builtin || seen[name] {
			return false
		}
		if why := refusal(b); why != "" {
			seen[name] = true
			row := 0
			if t.Location != nil {
				row = t.Location.Row
			}
			errs = append(errs, &BuiltinError{Module: module, Builtin: name, Row: row, Why: why})
		}
		return false
	})
	ast.WalkExprs(m, func(x *ast.Expr) bool {
		if x.IsCall() && strings.HasPrefix(x.Operator().String(), "time.") && namesLocalZone(x.Operands()) {
			row := 0
			if x.Location != nil {
				row = x.Location.Row
			}
			errs = append(errs, &BuiltinError{Module: module, Builtin: x.Operator().String(), Row: row,
				Why: `the time zone "Local" is the node's: name one, such as "Europe/Oslo"`})
		}
		return false
	})
	return errors.Join(errs...)
}

// namesLocalZone reports whether a time built-in's operands name the time
// zone "Local" ([ns, "Local"]). A zone not known until the evaluation is
// refused then (cost.go).
func namesLocalZone(operands []*ast.Term) bool {
	for _, o := range operands {
		if arr, ok := o.Value.(*ast.Array); ok && arr.Len() > 1 && arr.Elem(1).Value.Compare(ast.String("Local")) == 0 {
			return true
		}
	}
	return false
}

// CheckModules compiles a workspace's own modules with the bus's, exactly
// as a bus does when it loads the configuration, and returns the error
// that would make the bus refuse it (wrapping ErrCompile), or nil. The
// operator calls it so that a Tenant whose modules a bus would refuse is
// reported, never rolled out.
func CheckModules(modules []config.PolicyModule) error {
	_, err := (&Engine{store: inmem.New()}).compile(context.Background(), modules)
	return err
}
