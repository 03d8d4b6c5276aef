package policy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/storybus/storybus/policy"
)

// TestRego runs the embedded modules' _test.rego unit tests, as `opa test
// --coverage` would, and fails when one fails or errs, when none ran, when
// a module has no _test.rego of its own, or when a line of the bus's modules
// is left unevaluated by every test.
func TestRego(t *testing.T) {
	srcs, err := policy.Modules(true)
	if err != nil {
		t.Fatal(err)
	}
	modules := map[string]*ast.Module{}
	own := map[string]*ast.Module{}
	for name, src := range srcs {
		m, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		modules[name] = m
		if !strings.HasSuffix(name, "_test.rego") {
			own[name] = m
		}
	}
	cov := cover.New()
	ch, err := tester.NewRunner().SetModules(modules).SetCoverageQueryTracer(cov).RunTests(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for r := range ch {
		ran++
		if r.Error != nil {
			t.Errorf("%s.%s: %v", r.Package, r.Name, r.Error)
		} else if r.Fail {
			t.Errorf("%s.%s failed", r.Package, r.Name)
		}
	}
	if files := len(modules) - len(own); ran < 15 || files < 5 {
		t.Fatalf("only %d Rego tests ran from %d test files", ran, files)
	}
	for name := range own {
		if test := strings.TrimSuffix(name, ".rego") + "_test.rego"; modules[test] == nil {
			t.Errorf("%s has no tests: write them in %s", name, test)
		}
	}
	report := cov.Report(own)
	for name := range own {
		if lines := notCovered(report.Files[name]); len(lines) > 0 {
			t.Errorf("%s: no test evaluates line %s", name, strings.Join(lines, ", "))
		}
	}
	if !t.Failed() {
		t.Logf("%d Rego tests passed, every line of %d modules evaluated", ran, len(own))
	}
}

// notCovered lists the lines of a module's coverage report that no test
// evaluated, as "12" or "12-14".
func notCovered(fr *cover.FileReport) []string {
	var out []string
	for _, r := range fr.NotCovered {
		line := fmt.Sprint(r.Start.Row)
		if r.End.Row != r.Start.Row {
			line += fmt.Sprintf("-%d", r.End.Row)
		}
		if !slices.Contains(out, line) {
			out = append(out, line)
		}
	}
	return out
}
