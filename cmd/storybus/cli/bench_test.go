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
		{[]string{"--producers", "1,x"}, `invalid argument "1,x" for "--producers"`},
		{[]string{"--producers", "1,4,0"}, "producers must be at least 1, not 0"},
		{[]string{"--token", "t"}, "--token needs --url"},
		{[]string{"--ca-file", "ca.pem"}, "--ca-file needs --url"},
		{[]string{"--url", "https://bus.example/v1/tenants"}, "want http(s)://host/v1/tenants/<workspace>"},
		{[]string{"--url", "https://bus.example/v1/tenants/newsroom"}, "--url needs --token, or --client-id with --client-secret"},
		{[]string{"--url", "https://bus.example/v1/tenants/newsroom", "--client-id", "cms"}, "--client-id needs --client-secret"},
		{[]string{"--url", "https://bus.example/v1/tenants/newsroom", "--token", "t"}, "--token needs --system-id"},
		{[]string{"--url", "https://bus.example/v1/tenants/newsroom", "--token", "t", "--client-id", "cms", "--client-secret", "s"}, "--token and a client secret: give one"},
		{[]string{"--url", "https://bus.example/v1/tenants/newsroom", "--token", "t", "--system-id", "cms", "--sync", "interval"}, "--sync applies to the embedded bus, not to --url"},
		{[]string{"--url", "https://bus.example/v1/tenants/newsroom", "--token", "t", "--system-id", "cms", "--phases", "relay"}, "--phases applies to the embedded bus, not to --url"},
		{[]string{"--url", "https://bus.example/v1/tenants/newsroom", "--token", "t", "--system-id", "cms", "--ca-file", "/nonexistent/ca.pem"}, "CA file"},
	} {
		code, _, stderr := run(t, "", append([]string{"bench"}, c.args...)...)
		if code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("bench %v: exit %d, %q; want %d naming %q", c.args, code, stderr, ExitUsage, c.want)
		}
	}
}
