package cli

// What a new user tripped on with the producer and consumer commands.

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/internal/testutil"
)

// `storybus publish` reports every input item, in input order, and goes on
// after one that is not a message, naming where it starts.
func TestPublishReportsEveryInputItem(t *testing.T) {
	url := startCLIBus(t)
	flags := []string{"publish", "--url", url, "--workspace", "newsroom", "--client-id", "cms", "--client-secret", cliCMSSecret, "--outbox", t.TempDir()}
	stdin := strings.Join([]string{
		snapshotJSON("", "story-i1", 1),
		`[1, 2]`,
		`headline: bridge`,
		`{"som_version": "1.0", "payload": {`, // never closed
		snapshotJSON("", "story-i2", 1) + ` 42`,
		`  "a string"`,
		snapshotJSON("", "story-i3", 1),
	}, "\n")
	code, out, errOut := run(t, stdin, flags...)
	ls := lines(t, out)
	want := []struct {
		status int
		input  string
	}{
		{202, ""}, {0, "stdin:2:1"}, {0, "stdin:3:1"}, {0, "stdin:4:1"}, {202, ""}, {0, "stdin:5:" + strconv.Itoa(len(snapshotJSON("", "story-i2", 1))+2)},
		{0, "stdin:6:3"}, {202, ""},
	}
	if code != ExitRefused || len(ls) != len(want) {
		t.Fatalf("exit %d, %d lines, want %d, %d lines:\n%s%s", code, len(ls), ExitRefused, len(want), out, errOut)
	}
	for i, w := range want {
		l := ls[i]
		if l.Status != w.status || l.Input != w.input {
			t.Errorf("line %d: status %d input %q, want %d %q: %+v", i+1, l.Status, l.Input, w.status, w.input, l)
		}
		if w.input != "" && (l.Class != "invalid" || !strings.HasPrefix(l.Error, w.input+": not ")) {
			t.Errorf("line %d: class %q error %q", i+1, l.Class, l.Error)
		}
	}
	if !strings.Contains(ls[1].Error, "not a JSON object: an array") || !strings.Contains(ls[3].Error, "not JSON") {
		t.Errorf("the errors do not say what is wrong: %q, %q", ls[1].Error, ls[3].Error)
	}
	if !strings.Contains(errOut, "5 of 8 input items not published") {
		t.Errorf("stderr: %q", errOut)
	}

	// A file of indented objects, the first broken halfway: the second
	// is still published, and the broken one is named by its first line.
	file := filepath.Join(t.TempDir(), "stories.json")
	broken := "{\n  \"som_version\": \"1.0\",\n  \"message_id\": \n"
	var good map[string]any
	if err := json.Unmarshal([]byte(snapshotJSON("", "story-i4", 1)), &good); err != nil {
		t.Fatal(err)
	}
	indented, _ := json.MarshalIndent(good, "", "  ")
	if err := os.WriteFile(file, []byte(broken+string(indented)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "", append(flags, file)...)
	ls = lines(t, out)
	if code != ExitRefused || len(ls) != 2 || ls[0].Input != file+":1:1" || ls[1].Status != 202 {
		t.Fatalf("indented file: exit %d\n%s%s", code, out, errOut)
	}
}

// With --attempts 1 and nothing listening, the message is kept, and the
// outbox entry says so too.
func TestPublishOnceKeepsAndTheEntrySaysSo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	outbox := t.TempDir()
	code, out, errOut := run(t, snapshotJSON("", "story-once", 1), "publish", "--url", down, "--workspace", "newsroom",
		"--client-id", "cms", "--client-secret", cliCMSSecret, "--outbox", outbox, "--attempts", "1")
	if ls := lines(t, out); code != ExitNotDelivered || len(ls) != 1 || !ls[0].Kept {
		t.Fatalf("%d %s %s", code, out, errOut)
	}
	code, out, _ = run(t, "", "outbox", "list", "--outbox", outbox, "--json")
	var entry OutboxLine
	if code != ExitOK || json.Unmarshal([]byte(out), &entry) != nil {
		t.Fatalf("list: %d %s", code, out)
	}
	if strings.Contains(entry.Reason, "not kept") || !strings.Contains(entry.Reason, "kept in the outbox") {
		t.Fatalf("the entry's reason: %q", entry.Reason)
	}
	code, out, _ = run(t, "", "outbox", "list", "--outbox", outbox)
	if code != ExitOK || !regexp.MustCompile(`STORY/ASSET.*\n.* story-once  `).MatchString(out) || strings.Contains(out, "story:") {
		t.Fatalf("the table's STORY/ASSET column shows another key than the story_id:\n%s", out)
	}
}

// A bus certificate the commands do not trust is configuration: exit 4
// at once, for publish (the message kept), token and consume.
func TestAnUntrustedCertificateExits4AtOnce(t *testing.T) {
	b := serveTLS(t, nil)
	conn := []string{"--url", "https://" + b.api, "--workspace", "newsroom", "--client-secret", cliCMSSecret}
	start := time.Now()
	code, out, errOut := run(t, snapshotJSON("", "story-tls", 1), append([]string{"publish", "--client-id", "cms", "--outbox", t.TempDir()}, conn...)...)
	ls := lines(t, out)
	if code != ExitNotAllowed || len(ls) != 1 || !ls[0].Kept || ls[0].Class != "not-allowed" || !strings.Contains(errOut, "--ca-file") {
		t.Fatalf("publish: %d %s %s", code, out, errOut)
	}
	for _, args := range [][]string{{"token", "--client-id", "cms"}, {"consume", "web", "--client-id", "reader"}, {"consume", "web", "--once", "--client-id", "reader"}} {
		if code, _, errOut := run(t, "", append(args, conn...)...); code != ExitNotAllowed || !strings.Contains(errOut, "certificate") {
			t.Fatalf("%v: %d %s", args, code, errOut)
		}
	}
	// The default policy's waits alone would take a minute.
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("took %s: retried", took)
	}
}

// `storybus token --help` lists the token command's exit codes, not
// publish's.
func TestTokenHelpListsItsOwnExitCodes(t *testing.T) {
	code, out, _ := run(t, "", "token", "--help")
	if code != ExitOK || !strings.Contains(out, "0 the token is printed") || strings.Contains(out, "outbox") || strings.Contains(out, "JSON object") {
		t.Fatalf("%d\n%s", code, out)
	}
}

// A missing setting is named alone, with the variable that also gives it;
// several are each named once.
func TestAMissingSettingIsNamedAlone(t *testing.T) {
	code, _, errOut := run(t, "", "token", "--workspace", "newsroom", "--client-secret", "s")
	if code != ExitUsage || errOut != "storybus: missing --client-id (or STORYBUS_CLIENT_ID)\n" {
		t.Fatalf("%d %q", code, errOut)
	}
	code, _, errOut = run(t, "", "token", "--workspace", "newsroom", "--client-id", "cms")
	if code != ExitUsage || errOut != "storybus: missing the client secret: --client-secret (or STORYBUS_CLIENT_SECRET), or a client certificate with --cert-file\n" {
		t.Fatalf("%d %q", code, errOut)
	}
	code, _, errOut = run(t, "", "consume", "web")
	if code != ExitUsage || strings.Count(errOut, "missing ") != 3 || !strings.Contains(errOut, "missing --workspace (or STORYBUS_WORKSPACE); missing --client-id") {
		t.Fatalf("%d %q", code, errOut)
	}
}

// `storybus consume` says the bus's explanation of a refusal.
func TestConsumeSaysTheBussExplanation(t *testing.T) {
	url := startCLIBus(t)
	for _, once := range []string{"--once", "--wait=1s"} {
		code, _, errOut := run(t, "", "consume", "mine", once, "--url", url, "--workspace", "newsroom", "--client-id", "cms", "--client-secret", cliCMSSecret)
		if code != ExitNotAllowed || !strings.Contains(errOut, `403 grant.family`) || !strings.Contains(errOut, `(the bus says "connection cms may consume no family")`) {
			t.Fatalf("%s: %d %q", once, code, errOut)
		}
	}
}

// With --nats-listen the bus logs the address NATS clients connect to,
// and that it asks them for no credentials.
func TestNATSListenIsLogged(t *testing.T) {
	var logs testutil.SyncBuffer
	o := ServeOptions{Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", DataDir: t.TempDir(), Sync: SyncAlways, NATSListen: "127.0.0.1:-1"}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- Serve(ctx, o, []*config.Workspace{cliWorkspace()}, slog.New(slog.NewTextHandler(&logs, nil)), func(net.Addr, net.Addr) { close(ready) })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Serve ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not listen within 30s")
	}
	m := regexp.MustCompile(`level=WARN msg="embedded NATS serves clients without authentication" nats=(nats://127\.0\.0\.1:\d+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no log line with the address:\n%s", logs.String())
	}
	nc, err := nats.Connect(m[1])
	if err != nil {
		t.Fatalf("the logged address %s: %v", m[1], err)
	}
	nc.Close()
}
