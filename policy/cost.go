package policy

import (
	"context"
	"errors"
	"fmt"
	"regexp/syntax"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// The cost of a workspace's modules. OPA checks an evaluation's deadline
// between its steps, never inside one built-in call, and nothing in OPA
// bounds what a call allocates. So, besides refusing by name the built-ins
// whose cost cannot be bounded (refusedNames), every built-in a workspace
// module may call is wrapped, once for the process, by a guard that acts
// only inside an evaluation of a workspace's own modules:
//
//   - before the call, the guard of a built-in whose one call can do
//     super-linear work or make a result far larger than its arguments
//     (replace, sprintf's widths, numbers.range, regular expressions, …)
//     estimates that work and that result from the arguments, and stops
//     the evaluation when the estimate is past the per-call work bound or
//     the evaluation's remaining memory budget;
//   - after the call, every result is charged to the budget: past it, the
//     evaluation stops.
//
// A stopped evaluation answers like one past its deadline (ErrTimeout,
// 503 policy.timeout): nothing is decided, nothing memoised.

// EvalBudget is the bytes of values the built-in calls of one evaluation of
// a workspace's own modules may make together: strings and numbers by
// their length, arrays, objects and sets by their members plus 16 bytes
// each.
const EvalBudget = 64 << 20

// maxCallWork bounds the work one built-in call may do, in steps of its
// worst case: a regular expression's pattern length times its text's, a
// patch's operations times its document, big-number digits multiplied. At
// this bound a call takes some tens of milliseconds on one core.
const maxCallWork = 1 << 25

// maxDigits bounds the numbers that go into or come out of a built-in in a
// workspace's evaluation (OPA converts a number to a big integer or float
// to compare or compute with it, which takes up to a second for the
// longest number a message can carry).
const maxDigits = 2000

// errCost is an evaluation stopped by its cost; eval reports it as
// ErrTimeout.
var errCost = errors.New("workspace policy evaluation stopped: its built-in calls exceeded their cost bound")

// budget is what is left of one evaluation's EvalBudget.
type budget struct{ left atomic.Int64 }

type budgetKey struct{}

// withBudget marks ctx as an evaluation of a workspace's own modules, with
// a fresh budget.
func withBudget(ctx context.Context) context.Context {
	b := &budget{}
	b.left.Store(EvalBudget)
	return context.WithValue(ctx, budgetKey{}, b)
}

func (b *budget) charge(n int64) error {
	if b.left.Add(-n) < 0 {
		return topdown.Halt{Err: fmt.Errorf("%w (%d bytes of values)", errCost, EvalBudget)}
	}
	return nil
}

// estimate is what one call of a built-in may cost, from its arguments:
// the bytes of its result and the steps of its work; err refuses the call
// outright (a built-in error: the call is undefined, as for a bad
// argument).
type estimate func(args []*ast.Term) (bytes, work int64, err error)

// estimates are the built-ins whose one call can cost far more than its
// arguments' size.
var estimates = map[string]estimate{
	// strings.NewReplacer's search table for a pattern takes up to the
	// pattern's length squared to build, before any cancellation.
	"replace": func(a []*ast.Term) (int64, int64, error) {
		s, old, repl := str(a, 0), str(a, 1), str(a, 2)
		return int64(len(s)) + occurrences(s, old)*int64(len(repl)), int64(len(s)) + int64(len(old))*int64(len(old)), nil
	},
	"strings.replace_n": func(a []*ast.Term) (int64, int64, error) {
		s := str(a, 1)
		n, pairs, tables := int64(len(s)), int64(0), int64(0)
		if obj, ok := arg(a, 0).(ast.Object); ok {
			obj.Foreach(func(k, v *ast.Term) {
				old, _ := k.Value.(ast.String)
				repl, _ := v.Value.(ast.String)
				n += occurrences(s, string(old)) * int64(len(repl))
				tables += int64(len(old)) * int64(len(old))
				pairs++
			})
		}
		return n, int64(len(s))*max(pairs, 1) + tables, nil
	},
	"concat": func(a []*ast.Term) (int64, int64, error) {
		n, sep := size(arg(a, 1)), int64(len(str(a, 0)))
		return n + sep*members(arg(a, 1)), n, nil
	},
	"sprintf": func(a []*ast.Term) (int64, int64, error) {
		// A * takes its width or precision from the arguments, up to
		// fmt's own bound of a million.
		stars := int64(strings.Count(str(a, 0), "*")) * 1e6
		n := int64(len(str(a, 0))) + size(arg(a, 1)) + widths(str(a, 0)) + stars
		return n, n, nil
	},
	"numbers.range": func(a []*ast.Term) (int64, int64, error) {
		n := rangeLen(arg(a, 0), arg(a, 1), ast.Number("1"))
		return 24 * n, n, nil
	},
	"numbers.range_step": func(a []*ast.Term) (int64, int64, error) {
		n := rangeLen(arg(a, 0), arg(a, 1), arg(a, 2))
		return 24 * n, n, nil
	},
	"json.marshal_with_options": func(a []*ast.Term) (int64, int64, error) {
		m := measure(arg(a, 0), EvalBudget+1)
		n, deepest := m.values, m.depth
		indent := int64(0)
		if opts, ok := arg(a, 1).(ast.Object); ok {
			for _, k := range []string{"prefix", "indent"} {
				if v := opts.Get(ast.StringTerm(k)); v != nil {
					if s, ok := v.Value.(ast.String); ok {
						indent += int64(len(s))
					}
				}
			}
		}
		out := m.size + n*indent*deepest
		return out, out, nil
	},
	"json.patch": func(a []*ast.Term) (int64, int64, error) {
		// A copy or a move can double the document, an add adds its
		// value: the document's size op by op, at most.
		doc, work := size(arg(a, 0)), int64(0)
		if ops, ok := arg(a, 1).(*ast.Array); ok {
			ops.Foreach(func(op *ast.Term) {
				if o, ok := op.Value.(ast.Object); ok {
					switch v := o.Get(ast.StringTerm("op")); {
					case v != nil && (v.Value.Compare(ast.String("copy")) == 0 || v.Value.Compare(ast.String("move")) == 0):
						doc = min(2*doc, 1<<50)
					default:
						doc += size(o)
					}
				}
				work += doc
			})
		}
		return doc, work, nil
	},
	"object.union_n": func(a []*ast.Term) (int64, int64, error) {
		return size(arg(a, 0)), members(arg(a, 0)) * size(arg(a, 0)), nil
	},
	"union": func(a []*ast.Term) (int64, int64, error) {
		return size(arg(a, 0)), members(arg(a, 0)) * size(arg(a, 0)), nil
	},
	"intersection": func(a []*ast.Term) (int64, int64, error) {
		return size(arg(a, 0)), members(arg(a, 0)) * size(arg(a, 0)), nil
	},
	"product": func(a []*ast.Term) (int64, int64, error) {
		d := size(arg(a, 0))
		return d, d * d, digitsWithin(d)
	},
	"mul": func(a []*ast.Term) (int64, int64, error) {
		d := digits(arg(a, 0)) + digits(arg(a, 1))
		return d, d * d, digitsWithin(d)
	},
	"div": func(a []*ast.Term) (int64, int64, error) {
		d := digits(arg(a, 0)) + digits(arg(a, 1))
		return d, d * d, digitsWithin(d)
	},
	"rem": func(a []*ast.Term) (int64, int64, error) {
		d := digits(arg(a, 0)) + digits(arg(a, 1))
		return d, d * d, digitsWithin(d)
	},
	"format_int": func(a []*ast.Term) (int64, int64, error) {
		d := digits(arg(a, 0))
		return 4 * d, d * d, digitsWithin(d)
	},
	"time.date":     localTime,
	"time.clock":    localTime,
	"time.weekday":  localTime,
	"time.format":   localTime,
	"time.add_date": localTime,
	"time.diff": func(a []*ast.Term) (int64, int64, error) {
		if _, _, err := localTime(a); err != nil {
			return 0, 0, err
		}
		return localTime(a[1:])
	},
}

// patternTimesText are the built-ins that match a pattern against a text:
// Go's regular expressions and globs take up to the pattern's length times
// the text's. The pattern is the first argument, the text the last of the
// first two or three.
var patternTimesText = map[string]int{
	"regex.match": 1, "re_match": 1, "regex.split": 1, "regex.find_n": 1,
	"regex.find_all_string_submatch_n": 1, "regex.replace": 0, "glob.match": 2,
	"regex.template_match": 1,
}

// sharesArguments are the built-ins whose results are made of their
// arguments' members, not copies of them.
var sharesArguments = map[string]bool{
	"object.get": true, "object.filter": true, "object.remove": true, "object.keys": true,
	"array.slice": true, "json.filter": true, "json.remove": true, "substring": true,
}

// patternSize is what a pattern costs per byte of text: its compiled
// program's instructions for a regular expression (a{1000} is 7 bytes and
// a thousand instructions), its length for a glob; past maxPatternSize it
// is refused, since OPA keeps compiled patterns in a process-wide cache.
func patternSize(builtin, pattern string) (int64, error) {
	if builtin == "glob.match" {
		return int64(len(pattern)) + 1, nil
	}
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return int64(len(pattern)) + 1, nil // OPA reports the bad pattern itself
	}
	n := instructions(re)
	if n > maxPatternSize {
		return 0, topdown.Halt{Err: fmt.Errorf("%w (a pattern of more than %d instructions)", errCost, maxPatternSize)}
	}
	return n, nil
}

// instructions estimates the compiled size of a parsed expression without
// compiling it (a compiled a{1000}{1000} would be a million instructions):
// a repetition counts its maximum times its body.
func instructions(re *syntax.Regexp) int64 {
	n := int64(1)
	for _, sub := range re.Sub {
		n += instructions(sub)
	}
	if re.Op == syntax.OpRepeat {
		n *= int64(max(re.Max, re.Min, 1))
	}
	return min(n, 1<<40)
}

// maxPatternSize bounds a regular expression's compiled program.
const maxPatternSize = 10_000

func init() {
	for name, text := range patternTimesText {
		estimates[name] = func(a []*ast.Term) (int64, int64, error) {
			pattern, s := str(a, 0), str(a, text)
			repl := int64(1)
			if name == "regex.replace" {
				pattern, s = str(a, 1), str(a, 0)
				repl = max(int64(len(str(a, 2))), 1)
			}
			inst, err := patternSize(name, pattern)
			if err != nil {
				return 0, 0, err
			}
			return int64(len(s)) * repl, inst * int64(len(s)+1), nil
		}
	}
	// The guards wrap OPA's own implementations in OPA's registry of
	// built-ins, which the evaluator reads: the process's one user of OPA
	// is this package. Evaluations of the bus's own modules alone carry no
	// budget and run unguarded; the one that runs a workspace's modules
	// (stage 12, with the bus's ownership rules) is guarded whole.
	//
	// OPA hands a built-in declared CanSkipBctx an empty context: a guard
	// needs the evaluation's, which carries its budget.
	for _, name := range TenantBuiltins() {
		if fn := topdown.GetBuiltin(name); fn != nil {
			topdown.RegisterBuiltinFunc(name, guarded(fn, estimates[name], sharesArguments[name]))
			ast.BuiltinMap[name].CanSkipBctx = false
		}
	}
}

// guarded is fn under the cost guard: est, when not nil, before the call,
// and the budget after it. A shallow result is charged by its members
// alone: it shares them with the arguments.
func guarded(fn topdown.BuiltinFunc, est estimate, shallow bool) topdown.BuiltinFunc {
	return func(bctx topdown.BuiltinContext, args []*ast.Term, iter func(*ast.Term) error) error {
		var b *budget
		if bctx.Context != nil {
			b, _ = bctx.Context.Value(budgetKey{}).(*budget)
		}
		if b == nil {
			return fn(bctx, args, iter)
		}
		if err := numbersWithin(args); err != nil {
			return err
		}
		if est != nil {
			bytes, work, err := est(args)
			if err != nil {
				return err
			}
			if work > maxCallWork {
				return topdown.Halt{Err: fmt.Errorf("%w (%d steps in one call, over %d)", errCost, work, maxCallWork)}
			}
			if bytes > b.left.Load() {
				return topdown.Halt{Err: fmt.Errorf("%w (%d bytes of values)", errCost, EvalBudget)}
			}
		}
		return fn(bctx, args, func(t *ast.Term) error {
			n := 16 * (1 + members(t.Value))
			if !shallow {
				m := measure(t.Value, b.left.Load()+1)
				if err := digitsWithin(m.digits); err != nil {
					return err
				}
				n = m.size
			}
			if err := b.charge(n); err != nil {
				return err
			}
			return iter(t)
		})
	}
}

// localTime refuses the time zone "Local" in a time built-in's first
// argument: it would tell a workspace the node's time zone, and make its
// decisions depend on the node it runs on.
func localTime(a []*ast.Term) (int64, int64, error) {
	if arr, ok := arg(a, 0).(*ast.Array); ok && arr.Len() > 1 {
		if tz, ok := arr.Elem(1).Value.(ast.String); ok && tz == "Local" {
			return 0, 0, errors.New(`the time zone "Local" is not available to workspace policies: name one, such as "Europe/Oslo"`)
		}
	}
	return 0, 0, nil
}

// numbersWithin stops the evaluation when an argument, or a member of an
// array or set argument, is a number of more than maxDigits digits. Deeper
// numbers came from the message or from a built-in's result, both checked
// already (inputWithin, guarded).
func numbersWithin(args []*ast.Term) error {
	for _, a := range args {
		if err := digitsWithin(digits(a.Value)); err != nil {
			return err
		}
		var err error
		each := func(x *ast.Term) {
			if err == nil {
				err = digitsWithin(digits(x.Value))
			}
		}
		switch v := a.Value.(type) {
		case *ast.Array:
			v.Foreach(each)
		case ast.Set:
			v.Foreach(each)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// inputWithin stops an evaluation of a workspace's modules whose input
// holds a number of more than maxDigits digits, at any depth.
func inputWithin(input ast.Value) error {
	return digitsWithin(measure(input, EvalBudget+1).digits)
}

func digitsWithin(d int64) error {
	if d > maxDigits {
		return topdown.Halt{Err: fmt.Errorf("%w (numbers of %d digits, over %d)", errCost, d, maxDigits)}
	}
	return nil
}

func arg(a []*ast.Term, i int) ast.Value {
	if i < len(a) && a[i] != nil {
		return a[i].Value
	}
	return ast.Null{}
}

func str(a []*ast.Term, i int) string {
	s, _ := arg(a, i).(ast.String)
	return string(s)
}

func digits(v ast.Value) int64 {
	if n, ok := v.(ast.Number); ok {
		return int64(len(n))
	}
	return 0
}

// occurrences is how often old is replaced in s: once between every two
// characters and at both ends when old is empty.
func occurrences(s, old string) int64 {
	if old == "" {
		return int64(utf8.RuneCountInString(s)) + 1
	}
	return int64(strings.Count(s, old))
}

// widths adds up the numbers in a format string, an upper bound of the
// widths and precisions its verbs pad to.
func widths(format string) int64 {
	var total, n int64
	for i := 0; i < len(format); i++ {
		if c := format[i]; c >= '0' && c <= '9' {
			n = min(n*10+int64(c-'0'), 1e7)
			continue
		}
		total, n = total+n, 0
	}
	return total + n
}

// rangeLen is the number of members numbers.range_step(from, to, step)
// makes; a huge or unreadable one counts as over any bound.
func rangeLen(from, to, step ast.Value) int64 {
	f, ok1 := from.(ast.Number)
	t, ok2 := to.(ast.Number)
	s, ok3 := step.(ast.Number)
	if !ok1 || !ok2 || !ok3 {
		return 0 // a type error, which OPA reports itself
	}
	a, okA := f.Int64()
	b, okB := t.Int64()
	st, okS := s.Int64()
	if !okA || !okB || !okS {
		return 1 << 62
	}
	if st <= 0 {
		return 0
	}
	d := b - a
	if d < 0 {
		d = -d
	}
	if d < 0 { // overflow
		return 1 << 62
	}
	return d/st + 1
}

// members is the number of members of an array, object or set.
func members(v ast.Value) int64 {
	switch v := v.(type) {
	case *ast.Array:
		return int64(v.Len())
	case ast.Object:
		return int64(v.Len())
	case ast.Set:
		return int64(v.Len())
	}
	return 0
}

// shape is what a walk of a value found: its size against the budget
// (strings and numbers by their length, arrays, objects and sets by their
// members plus 16 bytes each), how many values it holds, its deepest
// nesting and its longest number.
type shape struct{ size, values, depth, digits int64 }

// measure walks v until its size reaches limit, and then stops: OPA
// builds [a, a] of a without copying a, so the full size of a value made
// of shared members could be exponential in the work that made it.
func measure(v ast.Value, limit int64) shape {
	var m shape
	var visit func(v ast.Value, depth int64)
	visit = func(v ast.Value, depth int64) {
		if m.size >= limit {
			return
		}
		m.values++
		m.depth = max(m.depth, depth)
		switch v := v.(type) {
		case ast.String:
			m.size += int64(len(v))
		case ast.Number:
			m.size += int64(len(v))
			m.digits = max(m.digits, int64(len(v)))
		case *ast.Array:
			m.size += 16
			for i := 0; i < v.Len() && m.size < limit; i++ {
				m.size += 16
				visit(v.Elem(i).Value, depth+1)
			}
		case ast.Object:
			m.size += 16
			v.Foreach(func(k, x *ast.Term) { m.size += 16; visit(k.Value, depth+1); visit(x.Value, depth+1) })
		case ast.Set:
			m.size += 16
			v.Foreach(func(x *ast.Term) { m.size += 16; visit(x.Value, depth+1) })
		default:
			m.size += 16
		}
	}
	visit(v, 1)
	m.size = min(m.size, limit)
	return m
}

// size is what a value counts against the budget, up to just past it.
func size(v ast.Value) int64 { return measure(v, EvalBudget+1).size }
