package policy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/storybus/storybus/policy"
)

// TestRego runs the embedded modules' _test.rego unit tests, and fails when
// none ran.
func TestRego(t *testing.T) {
	srcs, err := policy.Modules(true)
	if err != nil {
		t.Fatal(err)
	}
	modules := map[string]*ast.Module{}
	for name, src := range srcs {
		m, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		modules[name] = m
	}
	ch, err := tester.NewRunner().SetModules(modules).RunTests(context.Background(), nil)
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
	files := 0
	for name := range srcs {
		if strings.HasSuffix(name, "_test.rego") {
			files++
		}
	}
	if ran < 15 || files < 5 {
		t.Fatalf("only %d Rego tests ran from %d test files", ran, files)
	}
	t.Logf("%d Rego tests passed", ran)
}
