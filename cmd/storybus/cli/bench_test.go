package cli

import (
	"strings"
	"testing"
)

// TestBenchRefusesBadFlags: every wrong flag is a usage error (exit 2)
// naming what is wrong, before anything starts.
func TestBenchRefusesBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sync", "sometimes"}, `sync must be always or interval, not "sometimes"`},
		{[]string{"--phases", "bus,relay-three-write"}, `unknown phase "relay-three-write"`},
		{[]string{"--producers", "0"}, "producers must be at least 1"},
		{[]string{"--rounds", "0"}, "rounds must be at least 1"},
	} {
		code, _, stderr := run(t, "", append([]string{"bench"}, c.args...)...)
		if code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("bench %v: exit %d, %q; want %d naming %q", c.args, code, stderr, ExitUsage, c.want)
		}
	}
}
