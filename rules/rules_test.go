package rules_test

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/storybus/storybus/rules"
)

var update = flag.Bool("update", false, "rewrite docs/rules.md from the catalogue")

const docPath = "../docs/rules.md"

// TestDocMatchesCatalogue fails when docs/rules.md drifts from the Go table.
func TestDocMatchesCatalogue(t *testing.T) {
	want := rules.Markdown()
	if *update {
		if err := os.WriteFile(docPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatal("docs/rules.md is stale: run `make docs`")
	}
}

func TestCatalogueEntriesAreComplete(t *testing.T) {
	all := rules.All()
	if len(all) < 30 {
		t.Fatalf("only %d rules", len(all))
	}
	for _, r := range all {
		if r.Meaning == "" || r.Fix == "" || r.Source == "" || r.Stage < 2 || r.Stage > 13 || r.Retry == "" {
			t.Errorf("incomplete entry %+v", r)
		}
		if r.Status == 0 && !r.Warning {
			t.Errorf("%s has no status and is no warning", r.ID)
		}
		// 4xx and 503, and 507 for a full topic: the one 5xx whose cause
		// is not the bus's to end.
		if r.Status != 0 && (r.Status < 400 || r.Status > 503) && r.Status != http.StatusInsufficientStorage {
			t.Errorf("%s has status %d", r.ID, r.Status)
		}
	}
}

// TestEveryRuleTheBusNamesIsCatalogued parses the bus's Go source and checks
// every rules.X constant and every string literal passed to rules.New.
func TestEveryRuleTheBusNamesIsCatalogued(t *testing.T) {
	consts := map[string]string{}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "rules.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING && n.IsExported() {
					v, _ := strconv.Unquote(lit.Value)
					if strings.Contains(v, ".") {
						consts[n.Name] = v
					}
				}
			}
		}
	}
	if len(consts) < 20 {
		t.Fatalf("found only %d rule constants", len(consts))
	}
	for name, id := range consts {
		if _, ok := rules.Lookup(id); !ok {
			t.Errorf("rules.%s = %q is not catalogued", name, id)
		}
	}
	used := 0
	err = filepath.Walk("..", func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "New" {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "rules" {
				return true
			}
			used++
			switch arg := call.Args[0].(type) {
			case *ast.SelectorExpr:
				if pkg, ok := arg.X.(*ast.Ident); !ok || pkg.Name != "rules" {
					return true // a rule id read at run time, e.g. from a policy result
				}
				if _, ok := consts[arg.Sel.Name]; !ok {
					t.Errorf("%s: rules.New(rules.%s) names no rule constant", fset.Position(call.Pos()), arg.Sel.Name)
				}
			case *ast.BasicLit:
				id, _ := strconv.Unquote(arg.Value)
				if _, ok := rules.Lookup(id); !ok {
					t.Errorf("%s: rule %q is not catalogued", fset.Position(call.Pos()), id)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if used < 20 {
		t.Fatalf("found only %d rules.New calls", used)
	}
}

func TestStatusOfUnknownRuleIsGeneric503(t *testing.T) {
	if got := rules.Status("no.such.rule"); got != 503 {
		t.Fatalf("status %d", got)
	}
	if got := rules.Status(rules.MessageInFlight); got != 503 {
		t.Fatalf("status %d", got)
	}
	if got := rules.Status(rules.StoryNotOwner); got != 409 {
		t.Fatalf("status %d", got)
	}
}

// TestTokenRulesFollowRFC6749: the token endpoint answers invalid_client
// with 401 (or 429 while locked out), temporarily_unavailable with 503,
// every other OAuth2 error with 400 (RFC 6749 §5.2); and docs/publish-api.md
// maps each of them to its rule.
func TestTokenRulesFollowRFC6749(t *testing.T) {
	doc, err := os.ReadFile("../docs/publish-api.md")
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]bool{}
	for _, r := range rules.TokenRules() {
		codes[r.OAuth2Error] = true
		status := rules.TokenStatus(r.ID)
		switch r.OAuth2Error {
		case rules.OAuth2InvalidClient:
			if status != 401 && status != 429 {
				t.Errorf("%s: invalid_client with %d", r.ID, status)
			}
		case rules.OAuth2TemporarilyUnavailable:
			if status != 503 {
				t.Errorf("%s: temporarily_unavailable with %d", r.ID, status)
			}
		case rules.OAuth2InvalidRequest, rules.OAuth2UnauthorizedClient, rules.OAuth2UnsupportedGrantType, rules.OAuth2InvalidScope:
			if status != 400 {
				t.Errorf("%s: %s with %d", r.ID, r.OAuth2Error, status)
			}
		default:
			t.Errorf("%s: unknown OAuth2 error %q", r.ID, r.OAuth2Error)
		}
		row := fmt.Sprintf("| `%s` | %d | `%s` |", r.OAuth2Error, status, r.ID)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/publish-api.md lacks the row %s", row)
		}
	}
	if len(codes) != 6 {
		t.Errorf("the token endpoint answers %d OAuth2 error codes: %v", len(codes), codes)
	}
	if got := rules.TokenStatus(rules.SequenceStale); got != 503 {
		t.Errorf("a rule the token endpoint never answers with: %d", got)
	}
}
