package main_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

// TestServeFromTheEnvironment starts the bus configured by STORYBUS_
// variables alone, but for --listen, whose flag wins over its variable:
// it serves where the flag says, and --log-level warn from the
// environment leaves out the INFO line it writes once serving.
func TestServeFromTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	api, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	cmd := exec.Command(binary, "serve", "--listen", api)
	cmd.Env = append(os.Environ(),
		"STORYBUS_CONFIG="+writeConfig(t, dir),
		"STORYBUS_DATA_DIR="+filepath.Join(dir, "data"),
		"STORYBUS_LISTEN=not-an-address",
		"STORYBUS_OPS_LISTEN="+ops,
		"STORYBUS_LOG_LEVEL=warn",
	)
	logs := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("bus logs:\n%s", logs.String())
		}
	})
	testutil.Eventually(t, "ready on the operations address from the environment", 60*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("the bus stopped: %v", err)
		default:
		}
		res, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d", res.StatusCode)
		}
		return nil
	})
	c, err := net.DialTimeout("tcp", api, 5*time.Second)
	if err != nil {
		t.Fatalf("the publish port is not where --listen says: %v", err)
	}
	c.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the bus stopped with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the bus did not stop on SIGTERM")
	}
	if strings.Contains(logs.String(), "storybus bus serving") {
		t.Errorf("logged at INFO with STORYBUS_LOG_LEVEL=warn:\n%s", logs.String())
	}
}
