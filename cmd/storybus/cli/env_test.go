package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestEnvName: STORYBUS_, upper-case, dashes as underscores.
func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"sync": "STORYBUS_SYNC", "sync-interval": "STORYBUS_SYNC_INTERVAL", "client-secret": EnvClientSecret, "ca-file": EnvCAFile,
	} {
		if got := EnvName(flag); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", flag, got, want)
		}
	}
}

// TestFlagsFromEnv: every kind of flag readEnv marks takes its variable;
// the command line wins; an empty variable is unset; hidden, deprecated
// and unmarked flags are not read; a bad value is a usage error naming
// the variable.
func TestFlagsFromEnv(t *testing.T) {
	type probe struct {
		name, hidden, old, unmarked string
		n                           int
		on                          bool
		d                           time.Duration
		slice, array                []string
	}
	newProbe := func() (*cobra.Command, *probe) {
		p := &probe{}
		cmd := &cobra.Command{Use: "probe"}
		f := cmd.Flags()
		f.StringVar(&p.name, "probe-name", "default", "")
		f.IntVar(&p.n, "probe-count", 1, "")
		f.BoolVar(&p.on, "probe-on", false, "")
		f.DurationVar(&p.d, "probe-wait", time.Second, "")
		f.StringSliceVar(&p.slice, "probe-slice", []string{"x"}, "")
		f.StringArrayVar(&p.array, "probe-array", nil, "")
		f.StringVar(&p.hidden, "probe-hidden", "", "")
		_ = f.MarkHidden("probe-hidden")
		f.StringVar(&p.old, "probe-old", "", "")
		_ = f.MarkDeprecated("probe-old", "use --probe-name")
		readEnv(cmd)
		f.StringVar(&p.unmarked, "probe-unmarked", "", "")
		return cmd, p
	}
	for k, v := range map[string]string{
		"STORYBUS_PROBE_NAME": "from-env", "STORYBUS_PROBE_COUNT": "7", "STORYBUS_PROBE_ON": "true", "STORYBUS_PROBE_WAIT": "90s",
		"STORYBUS_PROBE_SLICE": "a,b", "STORYBUS_PROBE_ARRAY": "one.yaml,two.yaml", "STORYBUS_PROBE_HIDDEN": "read",
		"STORYBUS_PROBE_OLD": "read", "STORYBUS_PROBE_UNMARKED": "read",
	} {
		t.Setenv(k, v)
	}
	cmd, p := newProbe()
	if err := cmd.ParseFlags([]string{"--probe-count", "3"}); err != nil {
		t.Fatal(err)
	}
	if err := flagsFromEnv(cmd); err != nil {
		t.Fatal(err)
	}
	want := probe{name: "from-env", n: 3, on: true, d: 90 * time.Second, slice: []string{"a", "b"}, array: []string{"one.yaml", "two.yaml"}}
	if p.name != want.name || p.n != want.n || p.on != want.on || p.d != want.d ||
		strings.Join(p.slice, "|") != "a|b" || strings.Join(p.array, "|") != "one.yaml|two.yaml" ||
		p.hidden != "" || p.old != "" || p.unmarked != "" {
		t.Errorf("flags %+v, want %+v", *p, want)
	}
	if u := cmd.Flags().Lookup("probe-wait").Usage; !strings.Contains(u, "(env STORYBUS_PROBE_WAIT)") {
		t.Errorf("usage %q does not name the variable", u)
	}

	t.Setenv("STORYBUS_PROBE_NAME", "")
	cmd, p = newProbe()
	if err := flagsFromEnv(cmd); err != nil || p.name != "default" {
		t.Errorf("an empty variable gave %q, %v; want the default", p.name, err)
	}

	t.Setenv("STORYBUS_PROBE_COUNT", "many")
	cmd, _ = newProbe()
	var ue usageError
	if err := flagsFromEnv(cmd); !errors.As(err, &ue) || !strings.Contains(err.Error(), `STORYBUS_PROBE_COUNT="many"`) {
		t.Errorf("error %v, want a usage error naming STORYBUS_PROBE_COUNT", err)
	}
}

// TestServeAndOperatorReadTheEnvironment runs the commands through the
// entry point: a variable's value reaches the flag's validation, and a
// flag on the command line wins over it.
func TestServeAndOperatorReadTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"serve: a bad --sync from the environment", map[string]string{"STORYBUS_SYNC": "sometimes", "STORYBUS_CONFIG": "/nonexistent/workspace.yaml"},
			[]string{"serve"}, ExitUsage, "storybus: STORYBUS_SYNC: --sync must be always or interval"},
		{"serve: the command line wins", map[string]string{"STORYBUS_SYNC": "sometimes", "STORYBUS_CONFIG": "/nonexistent/workspace.yaml"},
			[]string{"serve", "--sync", "interval"}, ExitError, "/nonexistent/workspace.yaml"},
		{"serve: --log-level from the environment", map[string]string{"STORYBUS_LOG_LEVEL": "loud", "STORYBUS_CONFIG": "/nonexistent/workspace.yaml"},
			[]string{"serve"}, ExitUsage, "storybus: STORYBUS_LOG_LEVEL: --log-level"},
		{"serve: --log-level on the command line", nil,
			[]string{"serve", "--config", "/nonexistent/workspace.yaml", "--log-level", "loud"}, ExitUsage, "storybus: --log-level"},
		{"serve: a value the flag does not take", map[string]string{"STORYBUS_REPLICAS": "three"},
			[]string{"serve", "--config", "/nonexistent/workspace.yaml"}, ExitUsage, `STORYBUS_REPLICAS="three"`},
		{"operator: --kubeconfig from the environment", map[string]string{"STORYBUS_KUBECONFIG": "/nonexistent/from-env"},
			[]string{"operator"}, ExitError, "/nonexistent/from-env"},
		{"operator: the command line wins", map[string]string{"STORYBUS_KUBECONFIG": "/nonexistent/from-env"},
			[]string{"operator", "--kubeconfig", "/nonexistent/from-flag"}, ExitError, "/nonexistent/from-flag"},
		{"operator: a list from the environment", map[string]string{"STORYBUS_WATCH_NAMESPACES": "team-a,Team_B"},
			[]string{"operator"}, ExitUsage, `"Team_B" is not a namespace name`},
		{"operator: a bool from the environment", map[string]string{"STORYBUS_METRICS_SECURE": "maybe"},
			[]string{"operator"}, ExitUsage, "STORYBUS_METRICS_SECURE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, _, errOut := run(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d %q, want %d and %q", code, errOut, tc.code, tc.want)
			}
			if strings.Contains(tc.name, "wins") && strings.Contains(errOut, "from-env") || strings.Contains(errOut, "sometimes") && code != ExitUsage {
				t.Errorf("the environment's value was used over the flag's: %q", errOut)
			}
			if len(tc.env) == 0 && strings.Contains(errOut, EnvPrefix) {
				t.Errorf("a value from the command line is blamed on a variable: %q", errOut)
			}
		})
	}
}

// TestEveryServeAndOperatorFlagReadsTheEnvironment: a flag added to serve
// or operator after readEnv ran would have no variable; this finds it.
func TestEveryServeAndOperatorFlagReadsTheEnvironment(t *testing.T) {
	for _, cmd := range []*cobra.Command{newServeCommand(), newOperatorCommand()} {
		n := 0
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Deprecated != "" {
				return
			}
			n++
			if got := f.Annotations[envAnnotation]; len(got) != 1 || got[0] != EnvName(f.Name) {
				t.Errorf("%s --%s reads no environment variable (annotation %v)", cmd.Name(), f.Name, got)
			}
		})
		if n < 10 {
			t.Errorf("%s: only %d flags visited", cmd.Name(), n)
		}
	}
}
