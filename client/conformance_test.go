package client_test

// The Go runner of the client conformance scenarios
// (clients/conformance/scenarios.json, described in its README): every
// scenario runs against a real bus serving the workspace `storybus dev`
// serves, through client.Client, with the answers provoked by the sandbox
// header.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/client"
	"github.com/storybus/storybus/config/dev"
	"github.com/storybus/storybus/config/samples"
	"github.com/storybus/storybus/internal/openapitest"
)

// conformanceFile is the scenario file.
const conformanceFile = "../clients/conformance/scenarios.json"

// conformance is the scenario file, version 1.
type conformance struct {
	Version   int                        `json:"version"`
	Workspace string                     `json:"workspace"`
	ClientID  string                     `json:"clientId"`
	Messages  map[string]json.RawMessage `json:"messages"`
	Scenarios []conformanceScenario      `json:"scenarios"`
}

type conformanceScenario struct {
	Name    string `json:"name"`
	Summary string `json:"summary"`
	Retry   *struct {
		MaxAttempts int `json:"maxAttempts"`
	} `json:"retry"`
	Steps []conformanceStep `json:"steps"`
}

type conformanceStep struct {
	Publish    string            `json:"publish"`
	Concurrent []conformanceStep `json:"concurrent"`
	Answers    []string          `json:"answers"`
	// Expect is kept as JSON, so that every member present is checked
	// and a member this runner does not know fails the scenario.
	Expect map[string]json.RawMessage `json:"expect"`
}

// observed is what one publish step gave.
type observed struct {
	res    *client.Result
	err    error
	bodies [][]byte // every attempt's body, in order
	// tokens, waits and order are the step's own (only order is checked
	// for a concurrent step, its waits cannot be told apart by message).
	tokens int
	waits  []time.Duration
	order  []string
	// pending are the outbox's pending entries after the step.
	pending []client.Entry
	raw     []byte // the bytes handed to the client
}

// conformanceTransport is the http.RoundTripper the runner wraps around
// the client's: it sets the sandbox header of each publish attempt, and
// records the attempts, their bodies and order, and the token requests.
type conformanceTransport struct {
	base http.RoundTripper
	// names are the file's message keys by their bytes: an attempt is
	// named in order by the message whose bytes it sent, "?" by none.
	names map[string]string

	mu     sync.Mutex
	tokens int
	order  []string
	// running are the publishes of the current step, by message_id.
	running map[string]*publishRun
}

// publishRun is one message being published by a step.
type publishRun struct {
	key     string
	answers []string
	bodies  [][]byte
}

func (c *conformanceTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost {
		return c.base.RoundTrip(r)
	}
	switch {
	case strings.HasSuffix(r.URL.Path, "/tokens"):
		c.mu.Lock()
		c.tokens++
		c.mu.Unlock()
	case strings.HasSuffix(r.URL.Path, "/messages"):
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		var head struct {
			MessageID string `json:"message_id"`
		}
		_ = json.Unmarshal(body, &head)
		c.mu.Lock()
		answer, key := "", "?"
		if name, ok := c.names[string(body)]; ok {
			key = name
		}
		// The answers and the attempts are the step's message's own, told
		// apart by message_id: a kept message the client resends first is
		// only in the order.
		if run := c.running[head.MessageID]; run != nil {
			if n := len(run.bodies); n < len(run.answers) {
				answer = run.answers[n]
			}
			run.bodies = append(run.bodies, body)
		}
		c.order = append(c.order, key)
		c.mu.Unlock()
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		if answer != "" {
			r.Header.Set(bus.SandboxAnswerHeader, answer)
		}
	}
	return c.base.RoundTrip(r)
}

// begin registers the publishes of a step and returns what the transport
// had recorded before it.
func (c *conformanceTransport) begin(runs map[string]*publishRun) (tokens, order int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running = runs
	return c.tokens, len(c.order)
}

// end returns the token requests and attempts' keys since begin.
func (c *conformanceTransport) end(tokens, order int) (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running = nil
	return c.tokens - tokens, slices.Clone(c.order[order:])
}

// devBus is a real bus serving the workspace `storybus dev` serves, on an
// embedded JetStream in a temporary directory, every answer checked
// against docs/openapi.yaml.
func devBus(t *testing.T) string {
	t.Helper()
	ws, err := config.Parse(dev.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	st, err := store.Connect(store.Options{Embedded: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	srv := bus.New(bus.Options{Store: st, RequestTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err := srv.Apply(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
	api := openapitest.NewChecker(openapitest.PublishPort)
	t.Cleanup(func() { api.Report(t) })
	hs := httptest.NewServer(api.Handler(srv.Handler()))
	t.Cleanup(hs.Close)
	return hs.URL
}

// loadConformance reads the scenario file and checks what every runner
// relies on: the version, the workspace, distinct names, messages that
// exist, serialise compactly and are told apart by their bytes.
func loadConformance(t *testing.T) (*conformance, map[string][]byte) {
	t.Helper()
	b, err := os.ReadFile(conformanceFile)
	if err != nil {
		t.Fatal(err)
	}
	var f conformance
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", conformanceFile, err)
	}
	if f.Version != 1 || f.Workspace != samples.WorkspaceID || f.ClientID != samples.CMSClientID {
		t.Fatalf("%s: version %d, workspace %q, client %q: want 1, %q, %q", conformanceFile, f.Version, f.Workspace, f.ClientID, samples.WorkspaceID, samples.CMSClientID)
	}
	raw := map[string][]byte{}
	byBytes := map[string]string{}
	for key, m := range f.Messages {
		var buf bytes.Buffer
		if err := json.Compact(&buf, m); err != nil {
			t.Fatalf("message %q: %v", key, err)
		}
		if other, ok := byBytes[buf.String()]; ok {
			t.Fatalf("messages %q and %q are the same bytes: an attempt's order could not name it", key, other)
		}
		raw[key], byBytes[buf.String()] = buf.Bytes(), key
	}
	names := map[string]bool{}
	for _, sc := range f.Scenarios {
		if sc.Name == "" || names[sc.Name] || sc.Summary == "" || len(sc.Steps) == 0 {
			t.Fatalf("scenario %q: a unique name, a summary and steps are required", sc.Name)
		}
		names[sc.Name] = true
		for _, st := range sc.Steps {
			for _, p := range append([]conformanceStep{st}, st.Concurrent...) {
				if (p.Publish == "") == (len(p.Concurrent) == 0) {
					t.Fatalf("scenario %q: a step either publishes a message or runs steps concurrently", sc.Name)
				}
				if p.Publish != "" && raw[p.Publish] == nil {
					t.Fatalf("scenario %q: no message %q", sc.Name, p.Publish)
				}
			}
		}
	}
	return &f, raw
}

// TestConformance runs every scenario of clients/conformance/scenarios.json
// against a real bus through client.Client, each with a fresh client and
// outbox, and checks every expectation each step states. It also proves
// the checks can fail: each expectation altered must be reported.
func TestConformance(t *testing.T) {
	f, raw := loadConformance(t)
	url := devBus(t)
	for _, sc := range f.Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			runScenario(t, url, f, sc, raw)
		})
	}
}

// runScenario runs one scenario's steps in order.
func runScenario(t *testing.T, url string, f *conformance, sc conformanceScenario, raw map[string][]byte) {
	names := make(map[string]string, len(raw))
	for key, b := range raw {
		names[string(b)] = key
	}
	rt := &conformanceTransport{base: http.DefaultTransport, names: names}
	hc := &http.Client{Transport: rt}
	clock := newFakeClock()
	outbox, err := client.OpenOutbox(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var policy client.RetryPolicy
	if sc.Retry != nil {
		policy.Attempts = sc.Retry.MaxAttempts
	}
	c, err := client.New(client.Options{
		URL: url, Workspace: f.Workspace, HTTPClient: hc, Outbox: outbox, Clock: clock, Retry: policy,
		AttemptTimeout: 10 * time.Second,
		Tokens: &client.ClientCredentials{URL: url, Workspace: f.Workspace, ClientID: f.ClientID,
			ClientSecret: samples.CMSSecret, HTTPClient: hc, Clock: clock},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range sc.Steps {
		parts := []conformanceStep{st}
		if len(st.Concurrent) > 0 {
			parts = st.Concurrent
		}
		runs := map[string]*publishRun{}
		msgs := make([]*client.Message, len(parts))
		for j, p := range parts {
			m, err := client.NewMessage(raw[p.Publish])
			if err != nil {
				t.Fatalf("step %d: message %q: %v", i+1, p.Publish, err)
			}
			if runs[m.ID()] != nil {
				t.Fatalf("step %d: two messages of one step have message_id %s", i+1, m.ID())
			}
			msgs[j], runs[m.ID()] = m, &publishRun{key: p.Publish, answers: p.Answers}
		}
		tokens0, order0 := rt.begin(runs)
		waits0 := len(clock.Sleeps())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		pending := make([]*client.Pending, len(msgs))
		for j, m := range msgs { // handed over in order, at once
			pending[j] = c.Send(ctx, m)
		}
		obs := make([]*observed, len(msgs))
		for j, p := range pending {
			res, err := p.Wait()
			obs[j] = &observed{res: res, err: err, raw: raw[parts[j].Publish]}
		}
		cancel()
		tokens, order := rt.end(tokens0, order0)
		waits := clock.Sleeps()[waits0:]
		entries, err := outbox.List()
		if err != nil {
			t.Fatal(err)
		}
		for j, o := range obs {
			o.bodies = runs[msgs[j].ID()].bodies
			o.tokens, o.waits, o.order, o.pending = tokens, waits, order, entries
		}
		step := fmt.Sprintf("step %d", i+1)
		if len(st.Concurrent) > 0 {
			for j, p := range parts {
				checkStep(t, fmt.Sprintf("%s, part %d (%s)", step, j+1, p.Publish), sc, p, obs[j], partStep)
			}
			checkStep(t, step, sc, conformanceStep{Expect: st.Expect}, &observed{order: order}, concurrentStep)
			continue
		}
		checkStep(t, fmt.Sprintf("%s (%s)", step, st.Publish), sc, st, obs[0], plainStep)
	}
}

// checkStep checks every expectation of a step against what it gave, then
// checks that each one, altered, would have been reported.
func checkStep(t *testing.T, where string, sc conformanceScenario, st conformanceStep, o *observed, kind stepKind) {
	t.Helper()
	for _, m := range expectationMismatches(st.Expect, o, kind) {
		t.Errorf("%s: %s\n  (%s: %s)", where, m, sc.Name, sc.Summary)
	}
	for member := range st.Expect {
		altered := copyExpect(st.Expect)
		altered[member] = alter(member, st.Expect[member])
		if len(expectationMismatches(altered, o, kind)) == 0 {
			t.Errorf("%s: the runner does not notice a wrong %q (%s)", where, member, altered[member])
		}
	}
}

// copyExpect returns a copy of m.
func copyExpect(m map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// alter returns a wrong value of an expectation member.
func alter(member string, v json.RawMessage) json.RawMessage {
	switch member {
	case "outcome":
		if string(v) == `"kept"` {
			return json.RawMessage(`"accepted"`)
		}
		return json.RawMessage(`"kept"`)
	case "status", "attempts", "tokenRequests", "minWaitSeconds":
		var n float64
		_ = json.Unmarshal(v, &n)
		if member == "minWaitSeconds" {
			return json.RawMessage(fmt.Sprint(n + 3600))
		}
		return json.RawMessage(fmt.Sprint(n + 1))
	case "rule", "path":
		return json.RawMessage(`"/not/what/the/bus/said"`)
	case "sameBytes", "outbox":
		if string(v) == "true" {
			return json.RawMessage("false")
		}
		return json.RawMessage("true")
	case "waitsAtLeast":
		var w []float64
		_ = json.Unmarshal(v, &w)
		w = append(w, 3600)
		b, _ := json.Marshal(w)
		return b
	case "order":
		var keys []string
		_ = json.Unmarshal(v, &keys)
		slices.Reverse(keys)
		keys = append(keys, "(none)")
		b, _ := json.Marshal(keys)
		return b
	}
	return v
}

// stepKind is where an expectation stands.
type stepKind string

const (
	plainStep      stepKind = "a plain step"
	partStep       stepKind = "a step listed in a concurrent step"
	concurrentStep stepKind = "a concurrent step"
)

// expectMembers are the expectations each kind of step may state: the
// waits and token requests of a concurrent step cannot be told apart by
// message, and order belongs to the concurrent step or a plain one (where
// it shows a kept message resent before the step's own).
var expectMembers = map[stepKind][]string{
	plainStep:      {"outcome", "status", "rule", "path", "attempts", "sameBytes", "tokenRequests", "minWaitSeconds", "waitsAtLeast", "outbox", "order"},
	partStep:       {"outcome", "status", "rule", "path", "attempts", "sameBytes", "outbox"},
	concurrentStep: {"order"},
}

// expectationMismatches returns a sentence for each expectation that does
// not hold.
func expectationMismatches(expect map[string]json.RawMessage, o *observed, kind stepKind) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	e, _ := client.AsError(o.err)
	for member, v := range expect {
		if !slices.Contains(expectMembers[kind], member) {
			bad("%q is not an expectation of %s", member, kind)
			continue
		}
		switch member {
		case "outcome":
			var want string
			_ = json.Unmarshal(v, &want)
			if got := outcomeOf(o.res, o.err); got != want {
				bad("outcome %s, want %s (%v)", got, want, o.err)
			}
		case "status":
			var want int
			_ = json.Unmarshal(v, &want)
			got := 0
			switch {
			case o.res != nil:
				got = o.res.Status
			case e != nil:
				got = e.Status
			}
			if got != want {
				bad("status %d, want %d (%v)", got, want, o.err)
			}
		case "rule":
			var want string
			_ = json.Unmarshal(v, &want)
			if got := client.RuleOf(o.err); got != want {
				bad("rule %q, want %q (%v)", got, want, o.err)
			}
		case "path":
			var want string
			_ = json.Unmarshal(v, &want)
			got := ""
			if e != nil {
				for _, vi := range e.Violations {
					if vi.Rule == e.Rule {
						got = vi.Path
						break
					}
				}
			}
			if got != want {
				bad("path %q, want %q (%v)", got, want, o.err)
			}
		case "attempts":
			var want int
			_ = json.Unmarshal(v, &want)
			if len(o.bodies) != want {
				bad("%d attempts, want %d", len(o.bodies), want)
			}
		case "sameBytes":
			var want bool
			_ = json.Unmarshal(v, &want)
			same := true
			for _, b := range o.bodies {
				same = same && bytes.Equal(b, o.raw)
			}
			if same != want {
				bad("every attempt's body the same bytes: %t, want %t", same, want)
			}
		case "tokenRequests":
			var want int
			_ = json.Unmarshal(v, &want)
			if o.tokens != want {
				bad("%d token requests, want %d", o.tokens, want)
			}
		case "minWaitSeconds":
			var want float64
			_ = json.Unmarshal(v, &want)
			var sum time.Duration
			for _, w := range o.waits {
				sum += w
			}
			if sum < seconds(want) {
				bad("waited %s in all, want at least %gs (waits %v)", sum, want, o.waits)
			}
		case "waitsAtLeast":
			var want []float64
			_ = json.Unmarshal(v, &want)
			if len(o.waits) < len(want) {
				bad("%d waits %v, want at least %d", len(o.waits), o.waits, len(want))
				break
			}
			for i, w := range want {
				if o.waits[i] < seconds(w) {
					bad("wait %d was %s, want at least %gs (waits %v)", i+1, o.waits[i], w, o.waits)
				}
			}
		case "outbox":
			var want bool
			_ = json.Unmarshal(v, &want)
			var id struct {
				MessageID string `json:"message_id"`
			}
			_ = json.Unmarshal(o.raw, &id)
			held, unchanged := false, false
			for _, en := range o.pending {
				if en.MessageID == id.MessageID {
					held = true
					unchanged = unchanged || bytes.Equal(en.Message, o.raw)
				}
			}
			switch {
			case want && !unchanged:
				bad("the outbox holds the message unchanged: false (an entry of its message_id: %t)", held)
			case !want && held:
				bad("the outbox holds an entry of the message's message_id, want none")
			}
		case "order":
			var want []string
			_ = json.Unmarshal(v, &want)
			if !reflect.DeepEqual(o.order, want) {
				bad("the attempts' order %q, want %q", o.order, want)
			}
		default:
			bad("unknown expectation %q", member)
		}
	}
	slices.Sort(out) // map order is random; the report is not
	return out
}

// outcomeOf names a publish's final answer in the scenario file's terms.
func outcomeOf(res *client.Result, err error) string {
	e, _ := client.AsError(err)
	switch {
	case err == nil && res.Duplicate:
		return "duplicate"
	case err == nil:
		return "accepted"
	case e == nil:
		return "failed: " + err.Error()
	case e.Kept:
		return "kept"
	case e.Refused():
		return "refused"
	}
	return "failed without being kept"
}

// seconds converts the file's seconds.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
