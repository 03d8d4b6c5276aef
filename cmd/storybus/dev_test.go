package main_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/storybus/storybus/config/samples"
	"github.com/storybus/storybus/internal/testutil"
)

// TestDevPrintsAWorkingCurlPair runs `storybus dev` as a user would and
// pastes the curl pair it prints into a shell: 202 the first time, 200
// duplicate the second.
func TestDevPrintsAWorkingCurlPair(t *testing.T) {
	addr, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	banner := startDev(t, "--listen", addr, "--ops-listen", ops)
	if !strings.Contains(banner.pair[0], "http://"+addr) {
		t.Fatalf("the printed commands do not use http://%s: %s", addr, banner.pair[0])
	}
	pasteTwice(t, banner.pair)
}

// TestDevTLSPrintsAWorkingCurlPair runs `storybus dev --tls`: it serves
// HTTPS with a throwaway CA, prints the CA file and a curl pair that
// trusts it with --cacert, and the pair answers 202, then 200 duplicate.
// The CLI trusts the same CA through --ca-file and through SSL_CERT_FILE,
// and not without either.
func TestDevTLSPrintsAWorkingCurlPair(t *testing.T) {
	addr, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	banner := startDev(t, "--tls", "--listen", addr, "--ops-listen", ops)
	if banner.caFile == "" {
		t.Fatal("dev --tls printed no CA certificate line")
	}
	if _, err := os.Stat(banner.caFile); err != nil {
		t.Fatalf("the printed CA file: %v", err)
	}
	for _, line := range banner.pair {
		if !strings.Contains(line, "--cacert "+banner.caFile) || !strings.Contains(line, "https://"+addr) {
			t.Fatalf("the printed command does not trust the CA over https://%s: %s", addr, line)
		}
	}
	pasteTwice(t, banner.pair)

	token := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(binary, append([]string{"token", "--url", "https://" + addr, "--workspace", samples.WorkspaceID,
			"--client-id", samples.CMSClientID}, args...)...)
		cmd.Env = append(os.Environ(), append(env, "STORYBUS_CLIENT_SECRET="+samples.CMSSecret, "STORYBUS_CA_FILE=")...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := token(nil, "--ca-file", banner.caFile); err != nil || strings.Count(out, ".") != 2 {
		t.Fatalf("token --ca-file: %v %s", err, out)
	}
	if out, err := token([]string{"SSL_CERT_FILE=" + banner.caFile}); err != nil || strings.Count(out, ".") != 2 {
		t.Fatalf("token with SSL_CERT_FILE: %v %s", err, out)
	}
	if out, err := token([]string{"SSL_CERT_FILE=/dev/null", "SSL_CERT_DIR=/nonexistent"}); err == nil || !strings.Contains(out, "certificate") {
		t.Fatalf("token trusting nothing: %v %s", err, out)
	}
}

// TestDevRemovesItsFoldersOnSIGHUP closes the terminal of `storybus dev
// --tls` (SIGHUP): it ends gracefully and removes its temporary folders,
// the TLS key among them.
func TestDevRemovesItsFoldersOnSIGHUP(t *testing.T) {
	tmp := t.TempDir()
	addr, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	banner := startDevEnv(t, []string{"TMPDIR=" + tmp}, "--tls", "--listen", addr, "--ops-listen", ops)
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) < 2 {
		t.Fatalf("dev made %d temporary folders in TMPDIR, want its data and TLS folders: %v", len(entries), err)
	}
	if err := banner.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- banner.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("dev did not end gracefully on SIGHUP: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("dev still runs 60s after SIGHUP")
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind after SIGHUP: %s", e.Name())
	}
}

// devBanner is what `storybus dev` printed: the curl pair and, with --tls,
// the CA file; cmd is the running command.
type devBanner struct {
	pair   []string
	caFile string
	cmd    *exec.Cmd
}

// startDev runs `storybus dev` with args until the test ends, and reads
// its banner.
func startDev(t *testing.T, args ...string) devBanner {
	t.Helper()
	return startDevEnv(t, nil, args...)
}

// startDevEnv is startDev with env added to the environment.
func startDevEnv(t *testing.T, env []string, args ...string) devBanner {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed to paste the printed commands: %v", err)
	}
	cmd := exec.Command(binary, append([]string{"dev"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
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

	b := devBanner{cmd: cmd}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(30 * time.Second)
	for len(b.pair) < 2 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("dev exited before printing the curl pair; logs:\n%s", logs.String())
			}
			if ca, found := strings.CutPrefix(line, "CA certificate: "); found {
				b.caFile = ca
			}
			if strings.HasPrefix(line, "TOKEN=$(curl") || (len(b.pair) == 1 && strings.HasPrefix(line, "curl ")) {
				b.pair = append(b.pair, line)
			}
		case <-timeout:
			t.Fatalf("no curl pair printed in 30s; logs:\n%s", logs.String())
		}
	}
	t.Logf("dev ready in %s", time.Since(start).Round(time.Millisecond))
	return b
}

// pasteTwice pastes the curl pair into a shell twice: 202, then 200
// duplicate.
func pasteTwice(t *testing.T, pair []string) {
	t.Helper()
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

// TestDevProvesTheErrorPathsOfTheDocs runs the curl lines of "Prove your
// error paths" in docs/producers.md against `storybus dev`, whose sample
// workspace is a sandbox, and compares what they print with what the page
// says they print.
func TestDevProvesTheErrorPathsOfTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/producers.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(doc), "\n## Prove your error paths\n")
	if !found {
		t.Fatal("docs/producers.md has no section Prove your error paths")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```(sh)?\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 2 || blocks[0][1] != "sh" || blocks[1][1] != "" {
		t.Fatalf("the section needs a sh block and the block of what it prints, has %d blocks", len(blocks))
	}
	addr, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	startDev(t, "--listen", addr, "--ops-listen", ops)
	script := strings.ReplaceAll(blocks[0][2], "http://127.0.0.1:8080", "http://"+addr)
	out, err := exec.Command("bash", "-c", script).Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if string(out) != blocks[1][2] {
		t.Fatalf("the lines print:\n%s\nthe page says:\n%s", out, blocks[1][2])
	}
}
