// Package openapitest holds the bus's answers to its published description
// in tests: it loads docs/openapi.yaml with kin-openapi, and wraps a
// handler so that every answer it gives is validated against the
// description (status, headers, body schema, and the rule ids each status
// lists) before the client sees it.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/storybus/storybus/docs"
)

// Extensions of a response in the description: the catalogued rule ids a
// route answers with that status, and the sources all of whose rules it
// may answer with.
const (
	ExtRules       = "x-storybus-rules"
	ExtRuleSources = "x-storybus-rule-sources"
)

// TagOperations marks the operations port's routes; the others are the
// publish port's.
const TagOperations = "operations"

// Load reads the embedded description, resolving its references to the
// SOM schemas beside it, and validates it as an OpenAPI 3.1 document.
func Load() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	loader.ReadFromURIFunc = func(_ *openapi3.Loader, u *url.URL) ([]byte, error) {
		if u.Scheme != "" || u.Host != "" {
			return nil, fmt.Errorf("%s: the description refers only to files beside it", u)
		}
		return fs.ReadFile(docs.Files(), path.Clean(strings.TrimPrefix(u.Path, "/")))
	}
	doc, err := loader.LoadFromDataWithPath(docs.OpenAPI(), &url.URL{Path: docs.OpenAPIFile})
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", docs.OpenAPIFile, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("%s: %w", docs.OpenAPIFile, err)
	}
	return doc, nil
}

// Port says which of the bus's two ports a handler serves.
type Port int

// The bus's ports.
const (
	// PublishPort serves the workspaces' routes; any other path is API
	// Gateway's 403.
	PublishPort Port = iota
	// OperationsPort serves health, readiness, metrics and the description.
	OperationsPort
)

var (
	loadOnce  sync.Once
	loaded    *openapi3.T
	router    routers.Router
	errLoaded error
)

// description returns the loaded description and a router over it that
// matches any host: the tests' servers listen on ports of their own.
func description() (*openapi3.T, routers.Router, error) {
	loadOnce.Do(func() {
		loaded, errLoaded = Load()
		if errLoaded != nil {
			return
		}
		anyHost := *loaded
		anyHost.Servers = nil
		anyHost.Paths = openapi3.NewPaths()
		for p, item := range loaded.Paths.Map() {
			cp := *item
			cp.Servers = nil
			anyHost.Paths.Set(p, &cp)
		}
		router, errLoaded = gorillamux.NewRouter(&anyHost)
	})
	return loaded, router, errLoaded
}

// Checker validates the answers of the handlers it wraps and keeps the
// mismatches until they are taken.
type Checker struct {
	port Port
	mu   sync.Mutex
	errs []error
}

// NewChecker returns a checker of the answers of port.
func NewChecker(port Port) *Checker { return &Checker{port: port} }

// Take returns the mismatches found since the last Take, and forgets them.
func (c *Checker) Take() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	errs := c.errs
	c.errs = nil
	return errs
}

// Report fails t with the mismatches found since the last Take.
func (c *Checker) Report(t testing.TB) {
	t.Helper()
	for _, err := range c.Take() {
		t.Errorf("answer outside docs/openapi.yaml: %v", err)
	}
}

// Serve serves h on loopback for t, checking every answer of port. What
// no test took is reported when t ends, after the server has closed.
func Serve(t testing.TB, port Port, h http.Handler) (*httptest.Server, *Checker) {
	t.Helper()
	c := NewChecker(port)
	// Cleanups run last first: the server closes, then what it answered
	// is reported.
	t.Cleanup(func() { c.Report(t) })
	srv := httptest.NewServer(c.Handler(h))
	t.Cleanup(srv.Close)
	return srv, c
}

func (c *Checker) record(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

// Handler wraps h: each answer is held until it has been validated, then
// written, so a mismatch is recorded before the client has its answer. A
// handler that aborts (http.ErrAbortHandler) still drops the connection
// without an answer.
func (c *Checker) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if rec.header.Get("Content-Type") == "" && rec.body.Len() > 0 {
			// As net/http would send it.
			rec.header.Set("Content-Type", http.DetectContentType(rec.body.Bytes()))
		}
		if err := c.Check(r, rec.status, rec.header, rec.body.Bytes()); err != nil {
			c.record(fmt.Errorf("%s %s answered %d %s: %w", r.Method, r.URL.RequestURI(), rec.status, rec.body.Bytes(), err))
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	})
}

// Check validates one answer to req against the description.
func (c *Checker) Check(req *http.Request, status int, header http.Header, body []byte) error {
	doc, rt, err := description()
	if err != nil {
		return err
	}
	route, params, err := rt.FindRoute(req)
	onPort := err == nil && slices.Contains(route.Operation.Tags, TagOperations) == (c.port == OperationsPort)
	switch {
	case err != nil && !errors.Is(err, routers.ErrPathNotFound) && !errors.Is(err, routers.ErrMethodNotAllowed):
		return err
	case !onPort && c.port == PublishPort:
		return missingAuthenticationToken(doc, status, header, body)
	case !onPort && status != http.StatusNotFound:
		return errors.New("the operations port answers a path it does not serve with 404")
	case !onPort:
		return nil
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(req.Context(), input); err != nil {
		return err
	}
	return listedRules(route.Operation.Responses.Status(status).Value, status, body)
}

// missingAuthenticationToken checks API Gateway's answer to a path or
// method the publish port does not serve.
func missingAuthenticationToken(doc *openapi3.T, status int, header http.Header, body []byte) error {
	if header.Get("X-Request-Id") == "" {
		return errors.New("every answer of the publish port carries X-Request-Id")
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("an unknown route's answer is not JSON: %w", err)
	}
	if err := doc.Components.Schemas["AWSMessage"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return err
	}
	if m, _ := v.(map[string]any); status != http.StatusForbidden || m["message"] != "Missing Authentication Token" {
		return errors.New(`an unknown route is answered 403 {"message":"Missing Authentication Token"}`)
	}
	return nil
}

// listedRules checks that every violation of a refusal, and the rule of
// the token endpoint's OAuth2 error, has a rule the response lists
// (x-storybus-rules), or a source whose rules it may answer with all
// (x-storybus-rule-sources). A workspace's own rules (tenant.*) refuse
// with the status they declare, 403 or 409.
func listedRules(res *openapi3.Response, status int, body []byte) error {
	var refusal struct {
		Violations []struct {
			Source string `json:"source"`
			Rule   string `json:"rule"`
		} `json:"violations"`
		// Rule is an OAuth2 error's.
		Rule string `json:"rule"`
	}
	if json.Unmarshal(body, &refusal) != nil {
		return nil // not a refusal: its schema was checked
	}
	ruleIDs, sources := Listed(res)
	if refusal.Rule != "" && !slices.Contains(ruleIDs, refusal.Rule) {
		return fmt.Errorf("rule %s is not among the %s %v of this route's %d", refusal.Rule, ExtRules, ruleIDs, status)
	}
	for _, v := range refusal.Violations {
		tenantRule := strings.HasPrefix(v.Rule, "tenant.") && (status == http.StatusForbidden || status == http.StatusConflict)
		if !tenantRule && !slices.Contains(ruleIDs, v.Rule) && !slices.Contains(sources, v.Source) {
			return fmt.Errorf("rule %s (source %s) is not among the %s %v or %s %v of this route's %d", v.Rule, v.Source, ExtRules, ruleIDs, ExtRuleSources, sources, status)
		}
	}
	return nil
}

// Listed returns a response's x-storybus-rules and x-storybus-rule-sources.
func Listed(res *openapi3.Response) (ruleIDs, sources []string) {
	return stringList(res.Extensions[ExtRules]), stringList(res.Extensions[ExtRuleSources])
}

func stringList(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, s := range list {
		if s, ok := s.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// recorder holds a handler's answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
