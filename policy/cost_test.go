package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/types"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/internal/testutil"
	"github.com/storybus/storybus/policy"
)

// maxBody is the largest message the bus reads (SPEC §3.2 stage 2).
const maxBody = 240_000

// deadlineMargin is how long past its deadline one evaluation may run: the
// longest built-in call the guards admit, the message's conversion to Rego
// values (a tenth of a second for the deepest), a collection of the
// previous case's garbage, and the machine's noise. Under
// the race detector, which slows OPA's evaluator several times, it is
// wider; the cost bounds themselves (steps, bytes) are the same.
func deadlineMargin() time.Duration {
	if testutil.RaceDetector {
		return 3 * time.Second
	}
	return time.Second
}

// memoryBound is what one evaluation may allocate in all: the budget of
// its built-ins' values, OPA's own bookkeeping around them and the input
// (the message converted to Rego values).
const memoryBound = 4*policy.EvalBudget + 64<<20

// costModule is a workspace module whose deny rule evaluates body.
func costModule(body string) config.PolicyModule {
	return config.PolicyModule{Name: "cost", Rego: "package storybus.tenant.cost\n\n" +
		`deny contains {"rule": "tenant.cost", "message": "m"} if {` + "\n" + body + "\n}\n",
		Rules: []config.TenantRule{{ID: "tenant.cost", Status: 403, Meaning: "m", Fix: "f"}}}
}

// measure evaluates the workspace's module on doc once and returns how
// long it took, how many bytes were allocated meanwhile and the error.
func measure(t *testing.T, module config.PolicyModule, doc map[string]any) (time.Duration, uint64, error) {
	t.Helper()
	w := workspace()
	w.Policies = []config.PolicyModule{module}
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatalf("module refused: %v\n%s", err, module.Rego)
	}
	return evaluate(e, doc)
}

// evaluate evaluates e's modules on doc once and returns how long it took,
// how many bytes were allocated meanwhile and the error.
func evaluate(e *policy.Engine, doc map[string]any) (time.Duration, uint64, error) {
	in := message("news", "A long enough headline")
	in.Doc = doc
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start, cpu := time.Now(), processCPU()
	_, err := e.Publish(context.Background(), in, policy.HeadInput{})
	took, used := time.Since(start), processCPU()-cpu
	runtime.ReadMemStats(&after)
	// On a machine busy with other work an evaluation waits for a core as
	// well as working; the time it took is the smaller of the wall time and
	// the CPU time the process spent meanwhile, so that a runaway call fails
	// and a wait for a core does not.
	return min(took, used), after.TotalAlloc - before.TotalAlloc, err
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestUnboundedBuiltinsAreRefused turns the reproductions of one call
// that runs for minutes or takes the process's memory into load-time
// errors: a workspace module that calls such a built-in is never loaded.
func TestUnboundedBuiltinsAreRefused(t *testing.T) {
	for builtin, body := range map[string]string{
		// Nested ranges in text/template: 76 s of CPU for one publish at n = 170.
		"strings.render_template": `x := strings.render_template("{{range .a}}{{range $.a}}{{range $.a}}.{{end}}{{end}}{{end}}", {"a": numbers.range(1, 170)})
	count(x) < 0`,
		// Every path of a complete graph of ten nodes: minutes in one call.
		"graph.reachable_paths": `g := {sprintf("%d", [i]): {sprintf("%d", [j]) | some j in numbers.range(1, 10)} | some i in numbers.range(1, 10)}
	count(graph.reachable_paths(g, {"1"})) < 0`,
		// 1 << 2^33: a gigabyte at once; at 2^34 the process died.
		"bits.lsh":          `bits.lsh(1, 8589934592) > 0`,
		"graphql.parse":     `graphql.parse(input.message.doc.q, input.message.doc.s)`,
		"regex.globs_match": `regex.globs_match(input.message.doc.a, input.message.doc.b)`,
		"rego.parse_module": `rego.parse_module("x.rego", input.message.doc.m)`,
		// Aliases: a 110 KB document took 7 s and 1.3 GiB.
		"yaml.unmarshal": `yaml.unmarshal(input.message.doc.y)`,
	} {
		t.Run(builtin, func(t *testing.T) {
			err := policy.CheckModules([]config.PolicyModule{costModule(body)})
			var be *policy.BuiltinError
			if !errors.As(err, &be) || be.Builtin != builtin || !strings.Contains(err.Error(), "cost") {
				t.Fatalf("CheckModules: %v, want built-in %s refused for its cost", err, builtin)
			}
		})
	}
}

// TestGuardedCallsStopWithinTheirBounds runs modules whose one built-in
// call would do billions of steps or make gigabytes, with arguments a
// 240,000-byte message can carry: each evaluation ends with ErrTimeout
// within the deadline and its margin, and allocates within the bound.
func TestGuardedCallsStopWithinTheirBounds(t *testing.T) {
	text := strings.Repeat("ab", 100_000)
	for name, tc := range map[string]struct {
		body string
		doc  map[string]any
	}{
		// A character between every two: 200,000 × 200,000 bytes.
		"replace with an empty old": {`count(replace(input.message.doc.s, "", input.message.doc.s)) < 0`, map[string]any{"s": text}},
		"strings.replace_n":         {`count(strings.replace_n({"a": input.message.doc.s}, input.message.doc.s)) < 0`, map[string]any{"s": text}},
		// Each verb pads to a million characters.
		"sprintf widths": {`count(sprintf(input.message.doc.f, input.message.doc.a)) < 0`, map[string]any{"f": strings.Repeat("%999999d", 5_000), "a": repeated(5_000, json.Number("1"))}},
		"numbers.range":  {`count(numbers.range(1, 1000000000000)) < 0`, nil},
		// A pattern of 20,000 bytes over a text of 200,000.
		"regex.match": {`regex.match(input.message.doc.p, input.message.doc.s)`, map[string]any{"p": strings.Repeat("(a|b)", 4_000), "s": text}},
		"glob.match":  {`glob.match(input.message.doc.p, [], input.message.doc.s)`, map[string]any{"p": strings.Repeat("*a", 10_000), "s": text}},
		// Doubling a string at every step: a budget of values, not a deadline.
		"concat doubling": {doubling(24), map[string]any{"s": text}},
		// Widths taken from the arguments: a million characters a verb.
		"sprintf star widths": {`count(sprintf(input.message.doc.f, [1000000, 1])) < 0`, map[string]any{"f": strings.Repeat("%[1]*[2]d", 3_000)}},
		// Seven bytes, a thousand instructions each.
		"regex counted repetition": {`regex.match(input.message.doc.p, "b")`, map[string]any{"p": strings.Repeat("a{1000}", 3_000)}},
		// Each copy of the whole document doubles it.
		"json.patch copies": {`count(json.patch({"a": input.message.doc.s}, input.message.doc.ops)) < 0`,
			map[string]any{"s": strings.Repeat("x", 100), "ops": repeated(40, map[string]any{"op": "copy", "from": "", "path": "/b"})}},
		// Numbers as long as a message carries, one level deeper than an
		// argument: compared, each costs a big-number conversion.
		"nested long numbers": {`count(sort([[n] | some n in input.message.doc.n])) < 0`,
			map[string]any{"n": []any{json.Number("1" + strings.Repeat("0", 20_000)), json.Number("2" + strings.Repeat("0", 20_000))}}},
	} {
		t.Run(name, func(t *testing.T) {
			took, allocated, err := measure(t, costModule(tc.body), tc.doc)
			if !errors.Is(err, policy.ErrTimeout) {
				t.Fatalf("evaluation: %v, want ErrTimeout", err)
			}
			if limit := policy.DefaultTimeout + deadlineMargin(); took > limit {
				t.Errorf("took %s, over %s", took, limit)
			}
			if allocated > memoryBound {
				t.Errorf("allocated %d MiB, over %d MiB", allocated>>20, memoryBound>>20)
			}
		})
	}
}

// doubling is a rule body that doubles a string n times, one step each.
func doubling(n int) string {
	var b strings.Builder
	b.WriteString("s0 := input.message.doc.s\n")
	for i := range n {
		fmt.Fprintf(&b, "\ts%d := concat(\"\", [s%d, s%d])\n", i+1, i, i)
	}
	fmt.Fprintf(&b, "\tcount(s%d) < 0", n)
	return b.String()
}

// TestLocalTimeZoneIsRefused proves the time built-ins tell a workspace
// nothing of the node's time zone: a module naming "Local" is refused when
// it loads, one that gets "Local" from the message fails its evaluation
// (so nothing is decided by the node's zone), and a named zone works.
func TestLocalTimeZoneIsRefused(t *testing.T) {
	var be *policy.BuiltinError
	if err := policy.CheckModules([]config.PolicyModule{costModule(`d := time.date([0, "Local"])
	d[0] == 1970`)}); !errors.As(err, &be) || be.Builtin != "time.date" || !strings.Contains(err.Error(), "Local") {
		t.Fatalf("a module naming the Local zone: %v", err)
	}
	for zone, wantErr := range map[string]bool{"Local": true, "Europe/Oslo": false, "UTC": false} {
		w := workspace()
		w.Policies = []config.PolicyModule{costModule(`d := time.date([0, input.message.doc.zone])
	d[0] == 1970`)}
		e, err := policy.New(context.Background(), w)
		if err != nil {
			t.Fatal(err)
		}
		in := message("news", "A long enough headline")
		in.Doc = map[string]any{"zone": zone}
		d, err := e.Publish(context.Background(), in, policy.HeadInput{})
		if gotErr := err != nil; gotErr != wantErr || (!wantErr && len(d.Refusals) != 1) {
			t.Errorf("time.date in zone %s: %+v, %v", zone, d, err)
		}
	}
}

// TestEveryAllowedBuiltinWithinItsBounds is the property the guards
// promise: every built-in a workspace may call, with adversarial arguments
// of the largest size a 240,000-byte message can carry, ends its
// evaluation within the deadline and its margin and allocates within the
// bound, whatever it answers.
func TestEveryAllowedBuiltinWithinItsBounds(t *testing.T) {
	for _, name := range policy.TenantBuiltins() {
		b := ast.BuiltinMap[name]
		if b == nil || b.Decl == nil || strings.HasPrefix(name, "internal.") || name == "assign" || name == "eq" {
			continue // the compiler's own helpers and unification: not calls a module writes
		}
		call, kinds := callOf(b)
		if call == "" {
			continue
		}
		w := workspace()
		w.Policies = []config.PolicyModule{costModule("\tx := " + call + "\n\tis_null(x)")}
		e, err := policy.New(context.Background(), w)
		if err != nil {
			continue // deprecated: no module can make this call
		}
		for _, v := range adversaries {
			t.Run(name+"/"+v.name, func(t *testing.T) {
				// Any answer will do, an error included: the property is
				// the time and the memory.
				took, allocated, _ := evaluate(e, v.doc(kinds))
				if limit := policy.DefaultTimeout + deadlineMargin(); took > limit {
					t.Errorf("%s took %s, over %s", call, took, limit)
				}
				if allocated > memoryBound {
					t.Errorf("%s allocated %d MiB, over %d MiB", call, allocated>>20, memoryBound>>20)
				}
			})
		}
	}
}

// An argument's kind, as a message carries it.
const (
	kindString = iota
	kindNumber
	kindBool
	kindArray
	kindObject
	kindSet
)

// callOf is a call of b whose i-th argument is the message's member p<i>
// (a set is made of the members of an array), and the kinds of its
// arguments; "" for a built-in without arguments or with one of a type a
// message cannot carry.
func callOf(b *ast.Builtin) (string, []int) {
	args := b.Decl.FuncArgs().Args
	if len(args) == 0 {
		return "", nil
	}
	var out []string
	var kinds []int
	for i, a := range args {
		ref := fmt.Sprintf("input.message.doc.p%d", i)
		kind := kindString
		switch {
		case types.Compare(a, types.S) == 0:
		case types.Compare(a, types.N) == 0:
			kind = kindNumber
		case types.Compare(a, types.B) == 0:
			kind = kindBool
		default:
			switch a.(type) {
			case *types.Array:
				kind = kindArray
			case *types.Object:
				kind = kindObject
			case *types.Set:
				kind, ref = kindSet, "{x | some x in "+ref+"}"
			case types.Any:
			default:
				return "", nil
			}
		}
		out = append(out, ref)
		kinds = append(kinds, kind)
	}
	return b.Name + "(" + strings.Join(out, ", ") + ")", kinds
}

// adversary makes a message's arguments of the given kinds, sharing the
// largest size a message can carry between its large ones.
type adversary struct {
	name string
	// arg is the i-th of n arguments of a kind, each of about size bytes.
	arg func(kind, i, n, size int) any
}

// doc is the message holding a call's arguments.
func (a adversary) doc(kinds []int) map[string]any {
	doc := map[string]any{}
	for i, k := range kinds {
		doc[fmt.Sprintf("p%d", i)] = a.arg(k, i, len(kinds), (maxBody-1_000)/len(kinds))
	}
	return doc
}

// small is an argument of each kind that costs nothing.
func small(kind int) any {
	switch kind {
	case kindNumber:
		return json.Number("3")
	case kindBool:
		return true
	case kindArray, kindSet:
		return []any{"a", json.Number("1")}
	case kindObject:
		return map[string]any{"k": "v"}
	}
	return "a"
}

var adversaries = []adversary{
	{"large", func(kind, _, _, size int) any {
		switch kind {
		case kindString:
			return strings.Repeat("a*", size/2) // a pattern of stars, for globs and regular expressions
		case kindNumber:
			return json.Number(strings.Repeat("9", size))
		case kindArray, kindSet:
			return repeated(size/10, "a*a*a*a")
		case kindObject:
			return keys(size / 16)
		}
		return small(kind)
	}},
	{"large, empty, large", func(kind, i, _, size int) any {
		if kind != kindString {
			return small(kind)
		}
		if i%2 == 1 {
			return ""
		}
		return strings.Repeat("ab", size/2)
	}},
	{"widths", func(kind, _, _, size int) any {
		switch kind {
		case kindString:
			return strings.Repeat("%999999.999999f", size/15)
		case kindArray, kindSet:
			return repeated(size/3, json.Number("1"))
		}
		return small(kind)
	}},
	{"huge ranges", func(kind, i, _, _ int) any {
		if kind == kindNumber {
			return json.Number([]string{"0", "9007199254740991", "1"}[i%3])
		}
		return small(kind)
	}},
	{"deep", func(kind, _, _, size int) any {
		switch kind {
		case kindArray, kindSet:
			return nested(size / 4)
		case kindObject:
			return map[string]any{"k": nested(size / 4)}
		}
		return small(kind)
	}},
}

func repeated[T any](n int, s T) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func keys(n int) map[string]any {
	out := make(map[string]any, n)
	for i := range n {
		out[fmt.Sprintf("k%07d", i)] = "v"
	}
	return out
}

// nested is an array nested n deep.
func nested(n int) any {
	var v any = []any{}
	for range n {
		v = []any{v}
	}
	return v
}

// holdingModule runs until its deadline without calling a built-in in its
// loop, so no cost bound ends it sooner.
func holdingModule() config.PolicyModule {
	return costModule(`r := numbers.range(1, 100000)
	count([1 | some i in r; some j in r]) < 0`)
}

// TestPolicyConcurrencyIsBounded proves that past policyConcurrency
// evaluations of one workspace's modules running at once, the next is
// refused at once with ErrBusy rather than queued, and that a finished
// evaluation frees its slot.
func TestPolicyConcurrencyIsBounded(t *testing.T) {
	w := workspace()
	w.Policies = []config.PolicyModule{holdingModule()}
	w.PolicyConcurrency = 2
	w.PolicyTimeout.Duration = time.Second
	e, err := policy.New(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	in := message("news", "A long enough headline")
	type result struct {
		err  error
		took time.Duration
	}
	results := make(chan result, 3)
	for range 3 {
		go func() {
			start := time.Now()
			_, err := e.Publish(context.Background(), in, policy.HeadInput{})
			results <- result{err, time.Since(start)}
		}()
	}
	busy, timedOut := 0, 0
	for range 3 {
		r := <-results
		switch {
		case errors.Is(r.err, policy.ErrBusy):
			busy++
			if r.took > 200*time.Millisecond {
				t.Errorf("the refusal took %s: it waited", r.took)
			}
		case errors.Is(r.err, policy.ErrTimeout):
			timedOut++
		default:
			t.Errorf("evaluation: %v", r.err)
		}
	}
	if busy != 1 || timedOut != 2 {
		t.Fatalf("three evaluations of a second at once with two slots: %d busy, %d timed out; want 1 and 2", busy, timedOut)
	}
	if _, err := e.Publish(context.Background(), in, policy.HeadInput{}); !errors.Is(err, policy.ErrTimeout) {
		t.Fatalf("after the evaluations ended: %v, want a free slot and ErrTimeout", err)
	}
}
