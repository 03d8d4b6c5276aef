package main_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/internal/testutil"
)

// TestServeRefusesAModuleCallingARefusedBuiltIn starts the bus with a
// workspace module that calls http.send: the bus does not start, exits 1,
// and its message names the built-in and the module.
func TestServeRefusesAModuleCallingARefusedBuiltIn(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir)
	exfil := `policies:
  - name: exfil
    rego: |
      package storybus.tenant.exfil

      warn contains {"rule": "tenant.sent", "message": "sent"} if {
      	http.send({"method": "POST", "url": "http://127.0.0.1:1/", "body": input.message.doc})
      }
    rules:
      - {id: tenant.sent, status: 0, meaning: a copy was sent, fix: none}
`
	f, err := os.OpenFile(cfg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(exfil); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// A bus that started anyway would serve until killed: the deadline
	// turns that into a failure rather than a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve", "--config", cfg, "--data-dir", t.TempDir(),
		"--listen", testutil.FreeAddr(t), "--ops-listen", "127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the bus started with a module calling http.send; output:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1; output:\n%s", err, out)
	}
	for _, want := range []string{"workspace module exfil", "built-in http.send is not allowed"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not name %q:\n%s", want, out)
		}
	}
}
