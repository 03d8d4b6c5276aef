package docs_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/storybus/storybus/internal/openapitest"
	"github.com/storybus/storybus/rules"
)

func load(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %s, want 3.1", doc.OpenAPI)
	}
	return doc
}

// listing is one response of the description that lists rules.
type listing struct {
	route   string
	status  int
	rules   []string
	sources []string
	// oauth2 is set for the token endpoint's OAuth2 errors, whose status
	// is the catalogue's TokenStatus.
	oauth2 bool
}

func (l listing) String() string { return fmt.Sprintf("%s %d", l.route, l.status) }

// listings returns every response of the description that lists rules.
func listings(t *testing.T, doc *openapi3.T) []listing {
	t.Helper()
	var out []listing
	for p, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, res := range op.Responses.Map() {
				ids, sources := openapitest.Listed(res.Value)
				if len(ids)+len(sources) == 0 {
					continue
				}
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Fatalf("%s %s: response %q lists rules but is no status", method, p, code)
				}
				oauth2 := false
				if mt := res.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
					oauth2 = strings.HasSuffix(mt.Schema.Ref, "/TokenError")
				}
				out = append(out, listing{method + " " + p, status, ids, sources, oauth2})
			}
		}
	}
	return out
}

// TestEveryRuleIsDescribed fails when a catalogued rule's status is missing
// from the responses of the routes that answer it: every rule that refuses
// is listed by at least one route, under its catalogued status, and every
// rule a route lists is catalogued.
func TestEveryRuleIsDescribed(t *testing.T) {
	doc := load(t)
	all := listings(t, doc)
	for _, r := range rules.All() {
		if r.Status == 0 {
			continue // only ever a warning, reported under tolerated
		}
		var where []listing
		for _, l := range all {
			if slices.Contains(l.rules, r.ID) || slices.Contains(l.sources, string(r.Source)) {
				where = append(where, l)
			}
		}
		if len(where) == 0 {
			t.Errorf("rule %s (%d) is listed by no route of docs/openapi.yaml: add it to the %s of the routes that answer it", r.ID, r.Status, openapitest.ExtRules)
		}
		for _, l := range where {
			want := r.Status
			if l.oauth2 {
				want = rules.TokenStatus(r.ID)
			}
			if l.status != want {
				t.Errorf("%s lists rule %s, whose status there is %d", l, r.ID, want)
			}
		}
	}
	for _, l := range all {
		for _, id := range l.rules {
			if _, ok := rules.Lookup(id); !ok {
				t.Errorf("%s lists rule %s, which is not catalogued", l, id)
			}
		}
	}
}

// TestRetryAfterIsDescribed: every 429 and 503 of the publish port carries
// Retry-After, and the description says so.
func TestRetryAfterIsDescribed(t *testing.T) {
	doc := load(t)
	n := 0
	for p, item := range doc.Paths.Map() {
		if !strings.HasPrefix(p, "/v1/") {
			continue
		}
		for method, op := range item.Operations() {
			for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
				res := op.Responses.Status(status)
				if res == nil {
					continue
				}
				n++
				if h := res.Value.Headers["Retry-After"]; h == nil || !h.Value.Required {
					t.Errorf("%s %s: %d without a required Retry-After", method, p, status)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no 429 or 503 described")
	}
}
