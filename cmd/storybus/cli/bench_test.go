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
		{[]string{"--nats-url", "nats://127.0.0.1:4222", "--sync", "interval"}, "--sync applies to the embedded store or --cluster"},
		{[]string{"--nats-url", "nats://127.0.0.1:4222", "--cluster", "3"}, "not both"},
		{[]string{"--nats-server", "bin/nats-server"}, "--nats-server needs --cluster"},
		{[]string{"--replicas", "3"}, "replicas apply to a cluster"},
		{[]string{"--cluster", "1", "--replicas", "3"}, "3 replicas need at least as many nodes"},
		{[]string{"--workspaces", "0"}, "workspaces must be at least 1"},
		{[]string{"--url", "https://bus.example/v1/tenants/newsroom", "--token", "t", "--system-id", "cms", "--workspaces", "2"}, "--workspaces applies to the embedded bus, not to --url"},
		{[]string{"--url", "https://bus.example/v1/tenants/newsroom", "--token", "t", "--system-id", "cms", "--nats-url", "nats://127.0.0.1:4222"}, "--nats-url applies to the embedded bus, not to --url"},
	} {
		code, _, stderr := run(t, "", append([]string{"bench"}, c.args...)...)
		if code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("bench %v: exit %d, %q; want %d naming %q", c.args, code, stderr, ExitUsage, c.want)
		}
	}
}

// TestBenchConnectionFromTheEnvironment: bench reads the connection's
// client id, secret and CA file from the environment as the client
// commands do; a variable is not a flag given, so without --url it is
// ignored, and a secret there does not compete with --token.
func TestBenchConnectionFromTheEnvironment(t *testing.T) {
	url := "https://bus.example/v1/tenants/newsroom"
	t.Setenv(EnvClientID, "cms")
	t.Setenv(EnvCAFile, "/nonexistent/ca.pem")
	code, _, stderr := run(t, "", "bench", "--rounds", "0")
	if code != ExitUsage || strings.Contains(stderr, "needs --url") || !strings.Contains(stderr, "rounds must be at least 1") {
		t.Errorf("without --url: exit %d, %q; want only the --rounds error", code, stderr)
	}
	code, _, stderr = run(t, "", "bench", "--url", url)
	if code != ExitUsage || !strings.Contains(stderr, "--client-id needs --client-secret") || !strings.Contains(stderr, "CA file") {
		t.Errorf("with --url: exit %d, %q; want the client id and CA file of the environment used", code, stderr)
	}
	code, _, stderr = func() (int, string, string) {
		var out, errb strings.Builder
		t.Setenv(EnvClientSecret, "secret-from-the-environment")
		return Execute(t.Context(), []string{"bench", "--url", url, "--token", "t"}, strings.NewReader(""), &out, &errb), out.String(), errb.String()
	}()
	if code != ExitUsage || strings.Contains(stderr, "give one") || !strings.Contains(stderr, "CA file") {
		t.Errorf("--token with a secret in the environment: exit %d, %q; want only the CA file error", code, stderr)
	}
}
