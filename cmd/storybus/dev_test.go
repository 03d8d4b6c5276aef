package main_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/internal/testutil"
)

// TestDevPrintsAWorkingCurlPair runs `storybus dev` as a user would and
// pastes the curl pair it prints into a shell: 202 the first time, 200
// duplicate the second.
func TestDevPrintsAWorkingCurlPair(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed to paste the printed commands: %v", err)
	}
	addr, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	cmd := exec.Command(binary, "dev", "--listen", addr, "--ops-listen", ops)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	var pair []string
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(30 * time.Second)
	for len(pair) < 2 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("dev exited before printing the curl pair; logs:\n%s", logs.String())
			}
			if strings.HasPrefix(line, "TOKEN=$(curl") || (len(pair) == 1 && strings.HasPrefix(line, "curl ")) {
				pair = append(pair, line)
			}
		case <-timeout:
			t.Fatalf("no curl pair printed in 30s; logs:\n%s", logs.String())
		}
	}
	t.Logf("dev ready in %s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(pair[0], addr) {
		t.Fatalf("the printed commands do not use the listen address %s: %s", addr, pair[0])
	}
	script := strings.Join(pair, "\n")
	for i, want := range []string{`{"accepted":true,"message_id":"`, `{"accepted":true,"duplicate":true,"message_id":"`} {
		out, err := exec.Command("bash", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("paste %d: %v\n%s", i+1, err, out)
		}
		if !strings.HasPrefix(string(out), want) {
			t.Fatalf("paste %d answered %s, want %s…", i+1, out, want)
		}
	}
}
