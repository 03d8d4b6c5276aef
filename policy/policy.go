// Package policy decides the workspace's rules with embedded OPA (Rego v1):
// stage 4 (connection and IAM role), stage 5 (firewall), stage 6's limits,
// stage 9 (grants) and stage 12 (ownership and the workspace's own rules).
//
// The bus's Rego modules are embedded from rego/; a workspace may add its
// own modules in packages under storybus.tenant, which run sandboxed (no
// built-in that reaches the network, the clock or randomness; see
// sandbox.go) and under a deadline. Modules are compiled once,
// with PrepareForEval, when an Engine is built and when they change; the
// workspace's configuration is OPA data, replaced in place when it changes.
// A set of modules that does not compile never replaces the working one.
package policy

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/rules"
)

//go:embed rego/*.rego
var regoFS embed.FS

// Modules returns the bus's own Rego modules by file name, tests included
// when tests is true.
func Modules(tests bool) (map[string]string, error) {
	out := map[string]string{}
	err := fs.WalkDir(regoFS, "rego", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasSuffix(p, "_test.rego") && !tests {
			return nil
		}
		b, err := regoFS.ReadFile(p)
		out[path.Base(p)] = string(b)
		return err
	})
	return out, err
}

// Limits are a connection's rate limit and daily quota; zero is unlimited.
type Limits = config.Limits

// GateInput describes a request for stages 4 to 6.
type GateInput struct {
	Connection string
	// IAM is set on the AWS-signed routes.
	IAM      bool
	ClientIP string
	// MediaType is the request's Content-Type without parameters.
	MediaType string
	// JSONDepth is the body's bracket nesting depth.
	JSONDepth int
	// Body is the body, passed to the policy only when the firewall has
	// blocked patterns.
	Body []byte
}

// GateResult is the verdict of stages 4 and 5 and the limits of stage 6.
type GateResult struct {
	Refusal *rules.Violation
	Limits  Limits
}

// MessageInput describes a message for stages 9 and 12.
type MessageInput struct {
	Connection  string
	MessageType string
	Family      string
	SystemID    string
	StoryID     string
	// Doc is the whole message, given to the workspace's own modules.
	Doc map[string]any
}

// HeadInput is what stage 12 knows of the story's latest snapshot.
type HeadInput struct {
	Exists         bool   `json:"exists"`
	Owner          string `json:"owner"`
	SequenceNumber int64  `json:"sequence_number"`
	State          string `json:"state"`
}

// Decision is stage 12's verdict.
type Decision struct {
	Owner    string
	Refusals []rules.Violation
	Warnings []rules.Violation
}

// Engine evaluates one workspace's policy.
type Engine struct {
	store    storage.Store
	mu       sync.Mutex // serialises Update
	compiled atomic.Pointer[compiled]
}

// compiled is one compiled set of modules with its prepared queries.
type compiled struct {
	tenant    []config.PolicyModule
	hasTenant bool
	cfg       *config.Workspace
	// timeout bounds each evaluation that runs the workspace's own
	// modules.
	timeout time.Duration
	// slots holds a token for each evaluation of the workspace's own
	// modules that runs: at most policyConcurrency at once. A reload
	// keeps them, running evaluations and all, unless it changes their
	// number.
	slots chan struct{}
	// storyFree is true when no owner rule, hand-off or workspace module
	// can look at a story's id: stage 12 then decides without it, and one
	// memoised decision serves every story with the same head owner.
	storyFree bool
	// Decisions of the deterministic built-in modules, memoised by their
	// whole input for this generation of modules and data (a new
	// generation starts empty). The workspace's own modules, which see the
	// whole message, are evaluated every time. Only decisions are
	// memoised, never an evaluation that failed or timed out.
	gateMemo    *lru.Cache[string, GateResult]
	grantsMemo  *lru.Cache[string, *rules.Violation]
	publishMemo *lru.Cache[string, Decision]
	gate        rego.PreparedEvalQuery
	access      rego.PreparedEvalQuery
	grants      rego.PreparedEvalQuery
	families    rego.PreparedEvalQuery
	publish     rego.PreparedEvalQuery
}

// ErrCompile wraps a policy that did not compile; the previous policy
// stays in force.
var ErrCompile = errors.New("policy does not compile")

// New compiles the policy for the workspace.
func New(ctx context.Context, cfg *config.Workspace) (*Engine, error) {
	e := &Engine{store: inmem.New()}
	if err := e.Update(ctx, cfg); err != nil {
		return nil, err
	}
	return e, nil
}

// Update makes cfg the workspace's data and, when its own modules changed,
// recompiles. On error nothing changes: the previous policy stays in force.
func (e *Engine) Update(ctx context.Context, cfg *config.Workspace) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	data, err := workspaceData(cfg)
	if err != nil {
		return err
	}
	prev := e.compiled.Load()
	next := prev
	if prev == nil || !slices.EqualFunc(prev.tenant, cfg.Policies, samePolicyModule) {
		if next, err = e.compile(ctx, cfg.Policies); err != nil {
			return err
		}
	} else {
		c := *prev
		next = &c
	}
	next.cfg = cfg
	next.timeout = cmp.Or(cfg.PolicyTimeout.Duration, DefaultTimeout)
	if n := cmp.Or(cfg.PolicyConcurrency, DefaultConcurrency()); prev != nil && cap(prev.slots) == n {
		next.slots = prev.slots
	} else {
		next.slots = make(chan struct{}, n)
	}
	next.storyFree = !next.hasTenant && len(cfg.Ownership.Owners) == 0 && len(cfg.Ownership.Handoffs) == 0
	next.gateMemo, next.grantsMemo, next.publishMemo = newMemo[GateResult](), newMemo[*rules.Violation](), newMemo[Decision]()
	if err := storage.WriteOne(ctx, e.store, storage.AddOp, storage.Path{"workspace"}, data); err != nil {
		return fmt.Errorf("policy data: %w", err)
	}
	e.compiled.Store(next)
	return nil
}

func samePolicyModule(a, b config.PolicyModule) bool { return a.Name == b.Name && a.Rego == b.Rego }

// workspaceData is the configuration as OPA data, connections keyed by name.
func workspaceData(cfg *config.Workspace) (map[string]any, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var data map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		return nil, err
	}
	conns := map[string]any{}
	list, _ := data["connections"].([]any)
	for _, c := range list {
		conn := c.(map[string]any)
		// Credentials are not policy data: a workspace's own module could
		// read them.
		delete(conn, "secretHash")
		if iam, ok := conn["iam"].(map[string]any); ok {
			delete(iam, "secretAccessKey")
		}
		conns[conn["name"].(string)] = conn
	}
	data["connections"] = conns
	delete(data, "signingKey")
	delete(data, "policies")
	return data, nil
}

func (e *Engine) compile(ctx context.Context, tenant []config.PolicyModule) (*compiled, error) {
	compiler, err := compileModules(tenant)
	if err != nil {
		return nil, err
	}
	return e.prepare(ctx, compiler, tenant)
}

// compileModules compiles the bus's modules with the workspace's own, and
// refuses workspace modules that break the sandbox (see checkSandbox). A
// workspace with no module of its own gets the bus's modules compiled
// once for every such workspace: a compiler is only read once compiled,
// and it is most of what an engine holds.
func compileModules(tenant []config.PolicyModule) (*ast.Compiler, error) {
	if len(tenant) == 0 {
		return builtinCompiler()
	}
	compiler, err := compileRego(tenant)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, m := range tenant {
		errs = append(errs, checkSandbox(m.Name, compiler.Modules[tenantFile(m.Name)]))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	return compiler, nil
}

// builtinCompiler is the bus's own modules compiled, once per process.
var builtinCompiler = sync.OnceValues(func() (*ast.Compiler, error) { return compileRego(nil) })

// compileRego parses and compiles the bus's modules with the workspace's
// own, each of which must be package storybus.tenant.<name>.
func compileRego(tenant []config.PolicyModule) (*ast.Compiler, error) {
	own, err := Modules(false)
	if err != nil {
		return nil, err
	}
	opts := ast.ParserOptions{RegoVersion: ast.RegoV1}
	modules := map[string]*ast.Module{}
	for name, src := range own {
		if modules["storybus/"+name], err = ast.ParseModuleWithOpts("storybus/"+name, src, opts); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCompile, err)
		}
	}
	for _, m := range tenant {
		file := tenantFile(m.Name)
		parsed, err := ast.ParseModuleWithOpts(file, m.Rego, opts)
		if err != nil {
			return nil, fmt.Errorf("%w: workspace module %s: %w", ErrCompile, m.Name, err)
		}
		if want := "data.storybus.tenant." + m.Name; parsed.Package.Path.String() != want {
			return nil, fmt.Errorf("%w: workspace module %s must be package %s, not %s", ErrCompile, m.Name, strings.TrimPrefix(want, "data."), parsed.Package.Path)
		}
		modules[file] = parsed
	}
	compiler := ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithCapabilities(capabilities)
	if compiler.Compile(modules); compiler.Failed() {
		return nil, fmt.Errorf("%w: %w", ErrCompile, compiler.Errors)
	}
	return compiler, nil
}

func tenantFile(name string) string { return "tenant/" + name + ".rego" }

// capabilities are those the modules are compiled and evaluated with:
// every built-in (checkSandbox refuses workspace modules' calls to the
// sandbox's), and no host for the network built-ins, so that nothing a
// policy evaluates can reach the network, whatever it calls.
var capabilities = func() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	c.AllowNet = []string{}
	return c
}()

// prepare prepares the engine's queries over compiled modules.
func (e *Engine) prepare(ctx context.Context, compiler *ast.Compiler, tenant []config.PolicyModule) (*compiled, error) {
	prepare := func(query string) (rego.PreparedEvalQuery, error) {
		return rego.New(rego.Query(query), rego.Compiler(compiler), rego.Store(e.store),
			rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	}
	c := &compiled{tenant: slices.Clone(tenant), hasTenant: len(tenant) > 0}
	var err error
	for _, q := range []struct {
		dst   *rego.PreparedEvalQuery
		query string
	}{
		{&c.gate, "data.storybus.gate.verdict"},
		{&c.access, "data.storybus.access.refusal"},
		{&c.grants, "data.storybus.grants.refusal"},
		{&c.families, "data.storybus.grants.families"},
		{&c.publish, publishQuery(c.hasTenant)},
	} {
		if *q.dst, err = prepare(q.query); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCompile, q.query, err)
		}
	}
	return c, nil
}

func publishQuery(hasTenant bool) string {
	if hasTenant {
		return "data.storybus.publish.decision"
	}
	return "data.storybus.publish.ownership_decision"
}

// eval runs a prepared query and decodes its single value into out. The
// input is converted to a Rego value directly; the result, a small object,
// is decoded through JSON. A timeout above zero bounds the evaluation
// itself: past it, OPA stops evaluating and eval returns ErrTimeout. Such
// an evaluation, of a workspace's own modules, also has a cost budget
// (cost.go): past it, too, eval returns ErrTimeout.
func eval(ctx context.Context, timeout time.Duration, q rego.PreparedEvalQuery, input map[string]any, out any) error {
	value, err := ast.InterfaceToValue(input)
	if err != nil {
		return fmt.Errorf("policy input: %w", err)
	}
	ectx := ctx
	if timeout > 0 {
		if err := inputWithin(value); err != nil {
			return fmt.Errorf("%w: %w", ErrTimeout, err)
		}
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(withBudget(ctx), timeout)
		defer cancel()
	}
	rs, err := q.Eval(ectx, rego.EvalParsedInput(value))
	if err != nil {
		if ctx.Err() == nil && errors.Is(ectx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w of %s", ErrTimeout, timeout)
		}
		if errors.Is(err, errCost) {
			return fmt.Errorf("%w: %w", ErrTimeout, err)
		}
		return fmt.Errorf("policy evaluation: %w", err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return fmt.Errorf("policy evaluation: %d results", len(rs))
	}
	b, err := json.Marshal(rs[0].Expressions[0].Value)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// violation is a violation as the Rego modules write it.
type violation struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Path    string `json:"path"`
}

func (v *violation) toRule() *rules.Violation {
	if v == nil || v.Rule == "" {
		return nil
	}
	out := rules.New(v.Rule, v.Message, v.Path)
	return &out
}

// Gate decides stages 4 and 5 and returns the limits of stage 6.
func (e *Engine) Gate(ctx context.Context, in GateInput) (GateResult, error) {
	c := e.compiled.Load()
	key := ""
	blocking := len(c.cfg.Firewall.BlockedPatterns) > 0
	if !blocking {
		key = memoKey(in.Connection, strconv.FormatBool(in.IAM), in.ClientIP, in.MediaType, strconv.Itoa(in.JSONDepth))
		if r, ok := c.gateMemo.Get(key); ok {
			return r, nil
		}
	}
	req := map[string]any{"client_ip": in.ClientIP, "media_type": in.MediaType, "json_depth": in.JSONDepth}
	if blocking {
		req["body"] = string(in.Body)
	}
	r, err := e.gate(ctx, c, in, req)
	if err == nil && key != "" {
		c.gateMemo.Add(key, r)
	}
	return r, err
}

func (e *Engine) gate(ctx context.Context, c *compiled, in GateInput, req map[string]any) (GateResult, error) {
	var out struct {
		Refusal *violation `json:"refusal"`
		Limits  Limits     `json:"limits"`
	}
	err := eval(ctx, 0, c.gate, map[string]any{"connection": in.Connection, "iam": in.IAM, "request": req}, &out)
	return GateResult{Refusal: out.Refusal.toRule(), Limits: out.Limits}, err
}

// Access decides whether a connection may have a token: stage 4's
// connection check alone (connection.inactive), without the request's
// firewall and limits, for the token route.
func (e *Engine) Access(ctx context.Context, connection string) (*rules.Violation, error) {
	var out *violation
	if err := eval(ctx, 0, e.compiled.Load().access, map[string]any{"connection": connection, "iam": false}, &out); err != nil {
		return nil, err
	}
	return out.toRule(), nil
}

// Grants decides stage 9.
func (e *Engine) Grants(ctx context.Context, in MessageInput) (*rules.Violation, error) {
	c := e.compiled.Load()
	key := memoKey(in.Connection, in.SystemID, in.MessageType)
	if r, ok := c.grantsMemo.Get(key); ok {
		return r, nil
	}
	var out *violation
	err := eval(ctx, 0, c.grants, map[string]any{"connection": in.Connection, "message": messageInput(in, false)}, &out)
	if err != nil {
		return nil, err
	}
	r := out.toRule()
	c.grantsMemo.Add(key, r)
	return r, nil
}

// Families returns the families a connection may consume ("*" for all).
func (e *Engine) Families(ctx context.Context, connection string) ([]string, error) {
	var out []string
	err := eval(ctx, 0, e.compiled.Load().families, map[string]any{"connection": connection}, &out)
	return out, err
}

// Publish decides stage 12 for a message over its story head.
func (e *Engine) Publish(ctx context.Context, in MessageInput, head HeadInput) (Decision, error) {
	c := e.compiled.Load()
	if c.hasTenant {
		return e.publish(ctx, c, in, head)
	}
	if c.storyFree {
		in.StoryID = ""
	}
	key := memoKey(in.Connection, in.Family, in.SystemID, in.StoryID, strconv.FormatBool(head.Exists), head.Owner)
	if d, ok := c.publishMemo.Get(key); ok {
		d.Refusals, d.Warnings = slices.Clone(d.Refusals), slices.Clone(d.Warnings)
		return d, nil
	}
	d, err := e.publish(ctx, c, in, head)
	if err == nil {
		c.publishMemo.Add(key, d)
	}
	return d, err
}

func (e *Engine) publish(ctx context.Context, c *compiled, in MessageInput, head HeadInput) (Decision, error) {
	var out struct {
		Owner    string      `json:"owner"`
		Refusals []violation `json:"refusals"`
		Warnings []violation `json:"warnings"`
	}
	// Only the workspace's own modules are put under the deadline: the
	// bus's are fixed and bounded, and a loaded machine must not turn them
	// into refusals.
	var timeout time.Duration
	if c.hasTenant {
		timeout = c.timeout
		select {
		case c.slots <- struct{}{}:
			defer func() { <-c.slots }()
		default:
			return Decision{}, ErrBusy
		}
	}
	err := eval(ctx, timeout, c.publish, map[string]any{
		"connection": in.Connection,
		"message":    messageInput(in, c.hasTenant),
		"head":       map[string]any{"exists": head.Exists, "owner": head.Owner, "sequence_number": head.SequenceNumber, "state": head.State},
	}, &out)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Owner: out.Owner}
	for _, v := range out.Refusals {
		tv, err := tenantViolation(c.cfg, v, true)
		if err != nil {
			return Decision{}, err
		}
		d.Refusals = append(d.Refusals, tv)
	}
	for _, v := range out.Warnings {
		tv, err := tenantViolation(c.cfg, v, false)
		if err != nil {
			return Decision{}, err
		}
		d.Warnings = append(d.Warnings, tv)
	}
	return d, nil
}

// ErrUndeclaredRule is a workspace module emitting a rule id it did not
// declare, or denying with a catalogued rule that is only ever a warning: a
// configuration error, answered as a generic 503.
var ErrUndeclaredRule = errors.New("workspace policy emitted an undeclared rule")

// tenantViolation resolves a violation's source: the bus's rules from the
// catalogue, the workspace's own from their declarations.
func tenantViolation(cfg *config.Workspace, v violation, refusal bool) (rules.Violation, error) {
	// A catalogued rule refuses only if the catalogue gives it a status:
	// one that is only ever a warning would become a 503 to retry forever.
	if r, ok := rules.Lookup(v.Rule); ok && (r.Status != 0 || !refusal) {
		return rules.New(v.Rule, v.Message, v.Path), nil
	}
	if r, ok := cfg.TenantRule(v.Rule); ok && (r.Status != 0 || !refusal) {
		return rules.Violation{Source: rules.SourcePolicy, Rule: v.Rule, Message: v.Message, Path: v.Path}, nil
	}
	return rules.Violation{}, fmt.Errorf("%w: %q", ErrUndeclaredRule, v.Rule)
}

func messageInput(in MessageInput, withDoc bool) map[string]any {
	m := map[string]any{
		"message_type": in.MessageType, "family": in.Family, "system_id": in.SystemID, "story_id": in.StoryID,
	}
	if withDoc {
		m["doc"] = in.Doc
	}
	return m
}

// maxMemo bounds each memo; a full memo forgets its least recently used
// decision.
const maxMemo = 50_000

func newMemo[V any]() *lru.Cache[string, V] {
	m, err := lru.New[string, V](maxMemo)
	if err != nil { // only for a size below 1
		panic(err)
	}
	return m
}

// memoKey joins input fields with a separator no field can hold.
func memoKey(fields ...string) string { return strings.Join(fields, "\x00") }
