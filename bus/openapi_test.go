package bus_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/storybus/storybus/internal/openapitest"
)

// TestOpenAPIDescribesEveryRoute: the routes of the publish port are
// exactly those docs/openapi.yaml describes, and every path it describes
// on the operations port is served there.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	doc, err := openapitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	engine, ok := h.srv.Handler().(*gin.Engine)
	if !ok {
		t.Fatalf("the publish port's handler is a %T, not gin's engine", h.srv.Handler())
	}
	param := regexp.MustCompile(`:([A-Za-z]+)`)
	var served []string
	for _, r := range engine.Routes() {
		served = append(served, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}
	var described, ops []string
	for p, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if slices.Contains(op.Tags, openapitest.TagOperations) {
				ops = append(ops, method+" "+p)
				continue
			}
			described = append(described, method+" "+p)
		}
	}
	slices.Sort(served)
	slices.Sort(described)
	if !slices.Equal(served, described) {
		t.Fatalf("the publish port serves\n%s\ndocs/openapi.yaml describes\n%s", strings.Join(served, "\n"), strings.Join(described, "\n"))
	}

	if len(ops) < 5 {
		t.Fatalf("docs/openapi.yaml describes %d routes of the operations port", len(ops))
	}
	checker := openapitest.NewChecker(openapitest.OperationsPort)
	handler := checker.Handler(h.srv.OpsHandler())
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		path = strings.ReplaceAll(path, "{schema}", "envelope")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("%s %s: %d", method, path, rec.Code)
		}
	}
	checker.Report(t)
}
