package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/storybus/storybus/config/samples"
	"github.com/storybus/storybus/internal/testutil"
)

// asStorybus, set in the environment of this test binary, makes it the
// storybus command: TestMain runs the command line instead of the tests, so
// that the documentation's shell lines can call `storybus` from PATH.
const asStorybus = "CLI_TEST_RUN_AS_STORYBUS"

func TestMain(m *testing.M) {
	if os.Getenv(asStorybus) == "1" {
		// As cmd/storybus's main does.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		code := Execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// docsShell runs the documentation's shell lines the way a user does, from
// the repository root, with `storybus` (this test binary) on PATH and a
// home and state directory of the test's own.
type docsShell struct {
	root string
	env  []string
}

func newDocsShell(t *testing.T) *docsShell {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec %q \"$@\"\n", asStorybus, self)
	if err := os.WriteFile(filepath.Join(bin, "storybus"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + home, "XDG_STATE_HOME=" + filepath.Join(home, "state")}
	for _, kv := range os.Environ() {
		// The user's own settings are not the documentation's.
		if !strings.HasPrefix(kv, EnvPrefix) && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			env = append(env, kv)
		}
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return &docsShell{root: root, env: env}
}

// command returns bash running script, with the extra environment.
func (sh *docsShell) command(script string, env ...string) *exec.Cmd {
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = sh.root
	cmd.Env = append(append([]string(nil), sh.env...), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run runs script and returns what it printed on stdout; it fails the
// test when the script fails.
func (sh *docsShell) run(t *testing.T, script string, env ...string) string {
	t.Helper()
	cmd := sh.command(script, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s\nstdout:\n%s\nstderr:\n%s", err, script, out, stderr.String())
	}
	return string(out)
}

// docBlocks returns the fenced blocks of the section of page under
// heading, each as its language ("" for none) and its text.
func docBlocks(t *testing.T, page, heading string) [][2]string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(b), "\n"+heading+"\n")
	if !found {
		t.Fatalf("%s has no section %q", page, heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var out [][2]string
	for _, m := range regexp.MustCompile("(?s)```([a-z]*)\n(.*?)```").FindAllStringSubmatch(section, -1) {
		out = append(out, [2]string{m[1], m[2]})
	}
	return out
}

// TestDocsCommandLineRunsInSequence does what a new user does, in the
// documentation's order, against one `storybus dev`: the README's curl
// pair, twice; producers.md's "Prove your error paths" (whose first `lost`
// then answers 200 duplicate, as the page says); its command-line lines,
// which publish the files of docs/examples/; then consumers.md's `storybus
// consume`, which prints the story's snapshots in order.
func TestDocsCommandLineRunsInSequence(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed to paste the documentation's lines: %v", err)
	}
	sh := newDocsShell(t)
	addr, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	pair := sh.startDev(t, "--listen", addr, "--ops-listen", ops)
	base := "http://" + addr

	readme := docBlocks(t, "../../../README.md", "## Two commands")
	var answers []string
	for _, b := range readme {
		if b[0] == "json" {
			answers = append(answers, strings.TrimSpace(b[1]))
		}
	}
	if len(answers) != 2 {
		t.Fatalf("the README shows %d answers of the curl pair, want 2", len(answers))
	}
	for i, want := range answers {
		if got := strings.TrimSpace(sh.run(t, "set -eo pipefail\n"+pair)); got != want {
			t.Fatalf("paste %d of the curl pair answered\n%s\nthe README says\n%s", i+1, got, want)
		}
	}

	prove := docBlocks(t, "../../../docs/producers.md", "## Prove your error paths")
	if len(prove) != 2 || prove[0][0] != "sh" {
		t.Fatalf("Prove your error paths has %d blocks, want its lines and what they print", len(prove))
	}
	duplicate := answers[1] + " 200 Retry-After=\n"
	want := strings.Replace(prove[1][1], " 000 Retry-After=\n", duplicate, 1)
	if want == prove[1][1] {
		t.Fatal("Prove your error paths shows no lost answer")
	}
	if got := sh.run(t, strings.ReplaceAll(prove[0][1], "http://127.0.0.1:8080", base)); got != want {
		t.Fatalf("after the curl pair, the lines print\n%s\nthe page says, the first lost answered as a duplicate:\n%s", got, want)
	}

	cli := docBlocks(t, "../../../docs/producers.md", "## The command line")
	if len(cli) < 2 || cli[0][0] != "sh" || cli[1][0] != "" {
		t.Fatal("The command line has no sh block followed by what it prints")
	}
	url := EnvURL + "=" + base // the documentation's default is dev's own address
	if got := sh.run(t, "set -eo pipefail\n"+cli[0][1], url); got != cli[1][1] {
		t.Fatalf("the command line prints\n%s\nthe page says\n%s", got, cli[1][1])
	}

	consume := docBlocks(t, "../../../docs/consumers.md", "## `storybus consume`")
	if len(consume) < 1 || consume[0][0] != "sh" {
		t.Fatal("storybus consume has no sh block")
	}
	got := sh.consume(t, consume[0][1], 3, url)
	for i, l := range got {
		var m struct {
			Payload struct {
				StoryID  string `json:"story_id"`
				Sequence int    `json:"sequence_number"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(l.Message, &m); err != nil || l.Family != "story-context" || l.Delivery != 1 ||
			m.Payload.StoryID != "story-0001" || m.Payload.Sequence != i+1 {
			t.Fatalf("consume's line %d: %+v %+v", i+1, l, m)
		}
	}
	if !strings.Contains(samples.MessageSample, got[0].MessageID) {
		t.Fatalf("consume's first message is not the curl pair's: %s", got[0].MessageID)
	}
}

// startDev runs `storybus dev` with args until the test ends, and returns
// the curl pair it prints.
func (sh *docsShell) startDev(t *testing.T, args ...string) string {
	t.Helper()
	cmd := sh.command(`exec storybus dev "$@"`)
	cmd.Args = append(append(cmd.Args, "storybus"), args...) // $0, then "$@"
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, cmd, "dev") })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var pair []string
	timeout := time.After(60 * time.Second)
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
			t.Fatalf("no curl pair printed in 60s; logs:\n%s", logs.String())
		}
	}
	go func() {
		for range lines { // the rest of the banner
		}
	}()
	return strings.Join(pair, "\n")
}

// consume runs script, the documentation's `storybus consume`, until it has
// printed n lines, and stops it as Ctrl-C does.
func (sh *docsShell) consume(t *testing.T, script string, n int, env ...string) []ConsumeLine {
	t.Helper()
	cmd := sh.command(script, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stop(t, cmd, "consume")
	got := make(chan ConsumeLine)
	go func() {
		defer close(got)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l ConsumeLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l.MessageID = "not JSON: " + sc.Text()
			}
			got <- l
		}
	}()
	var out []ConsumeLine
	timeout := time.After(60 * time.Second)
	for len(out) < n {
		select {
		case l, ok := <-got:
			if !ok {
				t.Fatalf("consume ended after %d lines; stderr:\n%s", len(out), logs.String())
			}
			out = append(out, l)
		case <-timeout:
			t.Fatalf("consume printed %d lines in 60s, want %d; stderr:\n%s", len(out), n, logs.String())
		}
	}
	return out
}

// stop interrupts the process group of cmd, as Ctrl-C does, and waits for
// it; it kills it after 30 s.
func stop(t *testing.T, cmd *exec.Cmd, what string) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Errorf("%s still ran 30s after an interrupt", what)
	}
}

// TestREADMEPutsStorybusOnPath checks the README's two ways to the
// storybus command: `go install` writes it where the README's PATH line
// looks, and `make build` writes bin/storybus.
func TestREADMEPutsStorybusOnPath(t *testing.T) {
	blocks := docBlocks(t, "../../../README.md", "## The `storybus` command")
	if len(blocks) == 0 || blocks[0][0] != "sh" {
		t.Fatal("the README says nowhere how to put storybus on PATH")
	}
	lines := strings.Split(strings.TrimSpace(blocks[0][1]), "\n")
	if len(lines) != 2 || lines[0] != "go install ./cmd/storybus" || lines[1] != `export PATH="$(go env GOPATH)/bin:$PATH"` {
		t.Fatalf("the README's lines: %q", lines)
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOBIN=")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	target, gopath := goCmd("list", "-f", "{{.Target}}", "./cmd/storybus"), goCmd("env", "GOPATH")
	if filepath.Dir(target) != filepath.Join(gopath, "bin") || filepath.Base(target) != "storybus" {
		t.Fatalf("go install writes %s, the README's PATH line looks in %s/bin", target, gopath)
	}
	mk := exec.Command("make", "-n", "build")
	mk.Dir = root
	out, err := mk.Output()
	if err != nil || !strings.Contains(string(out), " -o "+filepath.Join(root, "bin", "storybus")+" ./cmd/storybus") {
		t.Fatalf("make build does not write bin/storybus: %v\n%s", err, out)
	}
}
