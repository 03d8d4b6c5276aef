package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/storybus/storybus/bus/config"
)

// DefaultTimeout bounds one evaluation of the workspace's own modules when
// the workspace configuration sets no policyTimeout.
const DefaultTimeout = 100 * time.Millisecond

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
}

func (e *BuiltinError) Error() string {
	return fmt.Sprintf("workspace module %s, line %d: built-in %s is not allowed in workspace policies (no network, clock, randomness or tracing)",
		e.Module, e.Row, e.Builtin)
}

// refusedNames are the built-ins workspace modules may not call beyond
// those OPA itself flags as non-deterministic; a trailing * refuses every
// name with that prefix.
var refusedNames = []string{
	"http.send",            // the network: exfiltration and SSRF from the publish path
	"net.*",                // DNS look-ups; the CIDR helpers with them, by rule
	"opa.runtime",          // the process's environment and configuration
	"trace",                // writes into the evaluation's trace
	"rand.*",               // randomness
	"uuid.rfc4122",         // randomness
	"time.now_ns",          // the clock: a retry must get the same answer
	"io.jwt.verify_*",      // key material and key look-ups
	"io.jwt.decode_verify", // key material and the clock
	"io.jwt.encode_sign*",  // signing keys; randomness in signatures
	"json.verify_schema",   // remote $ref look-ups
	"json.match_schema",    // remote $ref look-ups
	"crypto.x509.parse_and_verify_certificates*", // the clock
}

// refused reports whether workspace modules may not call the built-in.
func refused(b *ast.Builtin) bool {
	if b.Nondeterministic {
		return true
	}
	for _, n := range refusedNames {
		if prefix, wildcard := strings.CutSuffix(n, "*"); wildcard {
			if strings.HasPrefix(b.Name, prefix) {
				return true
			}
		} else if b.Name == n {
			return true
		}
	}
	return false
}

// TenantBuiltins returns the names of the built-in functions a workspace
// module may call, sorted: every built-in of this OPA version but those
// that reach outside the bus or make a decision vary between retries.
func TenantBuiltins() []string {
	var out []string
	for _, b := range ast.CapabilitiesForThisVersion().Builtins {
		if !refused(b) {
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
		if builtin && refused(b) && !seen[name] {
			seen[name] = true
			row := 0
			if t.Location != nil {
				row = t.Location.Row
			}
			errs = append(errs, &BuiltinError{Module: module, Builtin: name, Row: row})
		}
		return false
	})
	return errors.Join(errs...)
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
