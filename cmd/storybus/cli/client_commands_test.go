package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/internal/openapitest"
	"github.com/storybus/storybus/internal/storetest"
)

const (
	cliCMSSecret    = "cms-secret-0123456789abcdef0123456789"
	cliReaderSecret = "reader-secret-0123456789abcdef0123456789"
)

// startCLIBus serves workspace "newsroom" (connections cms, a producer,
// and reader, a consumer) on a real embedded JetStream.
func startCLIBus(t *testing.T) string {
	t.Helper()
	_, st := storetest.Embedded(t)
	srv := bus.New(bus.Options{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err := srv.Apply(context.Background(), cliWorkspace()); err != nil {
		t.Fatal(err)
	}
	hs, _ := openapitest.Serve(t, openapitest.PublishPort, srv.Handler())
	return hs.URL
}

// cliWorkspace is workspace "newsroom" with connections cms, a producer,
// and reader, a consumer.
func cliWorkspace() *config.Workspace {
	w := &config.Workspace{
		ID:         "newsroom",
		SigningKey: "newsroom-signing-key-0123456789abcdef0123",
		Connections: []config.Connection{
			{Name: "cms", SecretHash: config.HashSecret(cliCMSSecret), Grant: config.Grant{Publish: config.PublishGrant{
				SystemIDs: []string{"cms"}, MessageTypes: []string{"*"}}}},
			{Name: "reader", SecretHash: config.HashSecret(cliReaderSecret), Grant: config.Grant{Consume: config.ConsumeGrant{
				Families: []string{"*"}}}},
		},
	}
	w.Default()
	return w
}

// run runs the storybus command line; the environment holds no secret.
func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv(EnvClientSecret, "")
	var out, errb bytes.Buffer
	code = Execute(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func snapshotJSON(id, story string, seq int) string {
	if id == "" {
		id = uuid.NewString()
	}
	return `{"som_version":"1.0","message_id":"` + id + `","message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"` + story + `","sequence_number":` + string(rune('0'+seq)) + `,"state":"draft","headline":"Harbour bridge approved"}}`
}

func lines(t *testing.T, out string) []ResultLine {
	t.Helper()
	var ls []ResultLine
	for l := range strings.Lines(out) {
		var r ResultLine
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		ls = append(ls, r)
	}
	return ls
}

// checkFinalLine checks the documented shape of a command's final error: the
// last line of stderr, starting with "storybus: " once.
func checkFinalLine(t *testing.T, stderr string) {
	t.Helper()
	ls := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	last := ls[len(ls)-1]
	if !strings.HasPrefix(last, "storybus: ") || strings.Count(last, "storybus:") != 1 {
		t.Fatalf("the final error is not one line starting storybus: once: %q", stderr)
	}
}

func TestTokenCommand(t *testing.T) {
	url := startCLIBus(t)
	code, out, errOut := run(t, "", "token", "--url", url, "--workspace", "newsroom", "--client-id", "cms", "--client-secret", cliCMSSecret)
	if code != ExitOK || strings.Count(out, ".") != 2 || strings.Count(out, "\n") != 1 {
		t.Fatalf("%d %q %q", code, out, errOut)
	}
	t.Setenv(EnvClientSecret, cliCMSSecret)
	var buf bytes.Buffer
	if code := Execute(context.Background(), []string{"token", "--url", url, "--workspace", "newsroom", "--client-id", "cms", "--json"}, nil, &buf, &buf); code != ExitOK ||
		!strings.Contains(buf.String(), `"token_type":"Bearer"`) {
		t.Fatalf("secret from the environment: %d %s", code, buf.String())
	}
	code, _, errOut = run(t, "", "token", "--url", url, "--workspace", "newsroom", "--client-id", "cms", "--client-secret", "wrong")
	if code != ExitNotAllowed || !strings.Contains(errOut, "401 auth.credentials.invalid") {
		t.Fatalf("wrong secret: %d %q", code, errOut)
	}
	checkFinalLine(t, errOut)
	code, _, errOut = run(t, "", "token", "--url", url, "--client-id", "cms")
	if code != ExitUsage || !strings.Contains(errOut, "--workspace") || !strings.Contains(errOut, EnvClientSecret) {
		t.Fatalf("missing flags: %d %q", code, errOut)
	}
}

func TestPublishCommand(t *testing.T) {
	url := startCLIBus(t)
	outbox := t.TempDir()
	flags := []string{"--url", url, "--workspace", "newsroom", "--client-id", "cms", "--client-secret", cliCMSSecret, "--outbox", outbox}
	a, b := snapshotJSON("", "story-1", 1), snapshotJSON("", "story-2", 1)

	code, out, errOut := run(t, a+"\n"+b+"\n", append([]string{"publish"}, flags...)...)
	ls := lines(t, out)
	if code != ExitOK || len(ls) != 2 || ls[0].Status != 202 || ls[1].Status != 202 {
		t.Fatalf("%d %s %s", code, out, errOut)
	}
	// From a file, again: duplicates.
	file := filepath.Join(t.TempDir(), "messages.json")
	if err := os.WriteFile(file, []byte(a+b), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, "", append([]string{"publish", file}, flags...)...)
	ls = lines(t, out)
	if code != ExitOK || len(ls) != 2 || ls[0].Status != 200 || !ls[0].Duplicate {
		t.Fatalf("duplicates: %d %s", code, out)
	}
	// A stale snapshot is refused: exit 3, the rule on the line.
	code, out, errOut = run(t, snapshotJSON("", "story-1", 1), append([]string{"publish"}, flags...)...)
	ls = lines(t, out)
	if code != ExitRefused || len(ls) != 1 || ls[0].Rule != "sequence.stale" || ls[0].Class != "story-changed" || ls[0].Kept {
		t.Fatalf("stale: %d %s %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "rebuild a complete snapshot") {
		t.Fatalf("stderr %q", errOut)
	}
	// Not JSON: exit 3.
	if code, _, errOut := run(t, "headline: bridge", append([]string{"publish"}, flags...)...); code != ExitRefused {
		t.Fatalf("not JSON: %d %s", code, errOut)
	}
	// A system outside the grant: exit 4.
	wire := strings.Replace(snapshotJSON("", "story-3", 1), `"system_id":"cms"`, `"system_id":"wire"`, 1)
	if code, out, _ := run(t, wire, append([]string{"publish"}, flags...)...); code != ExitNotAllowed || !strings.Contains(out, "grant.system_id") {
		t.Fatalf("not granted: %d %s", code, out)
	}
}

func TestPublishKeepsAndOutboxResends(t *testing.T) {
	url := startCLIBus(t)
	outbox := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there
	msg := snapshotJSON("", "story-k", 1)
	code, out, errOut := run(t, msg, "publish", "--url", down, "--workspace", "newsroom", "--client-id", "cms",
		"--client-secret", cliCMSSecret, "--outbox", outbox, "--attempts", "2")
	ls := lines(t, out)
	if code != ExitNotDelivered || len(ls) != 1 || !ls[0].Kept || ls[0].Class != "not-delivered" {
		t.Fatalf("%d %s %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "warning") {
		t.Fatalf("no warning about the short retry policy: %q", errOut)
	}
	checkFinalLine(t, errOut)
	if last := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n"); !strings.Contains(last[len(last)-1], "kept in the outbox") {
		t.Fatalf("the final line lacks the cause's advice: %q", errOut)
	}

	code, out, _ = run(t, "", "outbox", "list", "--outbox", outbox, "--json")
	var entry OutboxLine
	if code != ExitOK || json.Unmarshal([]byte(out), &entry) != nil || string(entry.Message) != msg || entry.Attempts != 0 {
		t.Fatalf("list: %d %s", code, out)
	}
	code, out, _ = run(t, "", "outbox", "list", "--outbox", outbox)
	if code != ExitOK || !strings.Contains(out, " story-k ") || !strings.Contains(out, "no answer") {
		t.Fatalf("table: %d %s", code, out)
	}

	code, out, errOut = run(t, "", "outbox", "resend", "--url", url, "--workspace", "newsroom", "--client-id", "cms",
		"--client-secret", cliCMSSecret, "--outbox", outbox)
	ls = lines(t, out)
	if code != ExitOK || len(ls) != 1 || ls[0].Status != 202 {
		t.Fatalf("resend: %d %s %s", code, out, errOut)
	}
	if code, out, _ = run(t, "", "outbox", "list", "--outbox", outbox, "--json"); code != ExitOK || out != "" {
		t.Fatalf("after resend: %d %q", code, out)
	}
}

func TestConsumeCommand(t *testing.T) {
	url := startCLIBus(t)
	msg := snapshotJSON("", "story-c", 1)
	pub := []string{"publish", "--url", url, "--workspace", "newsroom", "--client-id", "cms", "--client-secret", cliCMSSecret, "--outbox", t.TempDir()}
	if code, out, errOut := run(t, msg, pub...); code != ExitOK {
		t.Fatalf("%d %s %s", code, out, errOut)
	}
	flags := []string{"--url", url, "--workspace", "newsroom", "--client-id", "reader", "--client-secret", cliReaderSecret}
	code, out, errOut := run(t, "", append([]string{"consume", "web", "--count", "1"}, flags...)...)
	var l ConsumeLine
	if code != ExitOK || json.Unmarshal([]byte(out), &l) != nil || string(l.Message) != msg || l.Family != "story-context" || l.Delivery != 1 {
		t.Fatalf("%d %q %q", code, out, errOut)
	}
	// Acknowledged: a second pull brings nothing.
	code, out, _ = run(t, "", append([]string{"consume", "web", "--once", "--wait", "0s"}, flags...)...)
	if code != ExitOK || out != "" {
		t.Fatalf("after the ack: %d %q", code, out)
	}
	// A family outside the grant of cms (none): exit 4.
	code, _, errOut = run(t, "", "consume", "mine", "--once", "--url", url, "--workspace", "newsroom", "--client-id", "cms", "--client-secret", cliCMSSecret)
	if code != ExitNotAllowed || !strings.Contains(errOut, "grant.family") {
		t.Fatalf("not granted: %d %q", code, errOut)
	}
	if code, _, _ := run(t, "", append([]string{"consume"}, flags...)...); code != ExitUsage {
		t.Fatalf("no name: %d", code)
	}

	// With --dedup-file, a message printed by one run is not printed by
	// the next, even under a new consumer name that receives it again.
	dedup := filepath.Join(t.TempDir(), "seen")
	for i, want := range []int{1, 0} {
		code, out, errOut := run(t, "", append([]string{"consume", "replay-" + strconv.Itoa(i), "--once", "--wait", "2s", "--dedup-file", dedup}, flags...)...)
		if code != ExitOK || strings.Count(out, "\n") != want {
			t.Fatalf("run %d: %d %q %q", i, code, out, errOut)
		}
	}
}

// --count N prints N messages, even when one pull brings more.
func TestConsumeCountStopsWithinAPull(t *testing.T) {
	url := startCLIBus(t)
	pub := []string{"publish", "--url", url, "--workspace", "newsroom", "--client-id", "cms", "--client-secret", cliCMSSecret, "--outbox", t.TempDir()}
	for i := range 3 {
		if code, out, errOut := run(t, snapshotJSON("", "story-n"+strconv.Itoa(i), 1), pub...); code != ExitOK {
			t.Fatalf("%d %s %s", code, out, errOut)
		}
	}
	flags := []string{"--url", url, "--workspace", "newsroom", "--client-id", "reader", "--client-secret", cliReaderSecret}
	code, out, errOut := run(t, "", append([]string{"consume", "counted", "--count", "1", "--max", "10"}, flags...)...)
	if code != ExitOK || strings.Count(out, "\n") != 1 {
		t.Fatalf("--count 1 printed %q (%d, %s)", out, code, errOut)
	}
}

// A stray argument is a usage error (exit 2) for every command that takes
// none, never ignored; so is an unknown command, at the top or in a group.
func TestStrayArgumentsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"}, {"publis"}, {"outbox", "bogus"}, {"version", "extra"}, {"help", "bogus"}, {"help", "outbox", "bogus"},
		{"serve", "extra"}, {"dev", "extra"}, {"bench", "extra"}, {"operator", "extra"},
		{"token", "extra"}, {"outbox", "list", "extra"}, {"outbox", "resend", "extra"}, {"consume", "a", "b"},
	} {
		if code, _, errOut := run(t, "", args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, ExitUsage, errOut)
		}
	}
	for _, args := range [][]string{{"help"}, {"help", "outbox", "list"}, {"outbox", "--help"}} {
		if code, out, errOut := run(t, "", args...); code != ExitOK || !strings.Contains(out, "Usage:") {
			t.Errorf("%v: exit %d, want %d with the help (%q %s)", args, code, ExitOK, out, errOut)
		}
	}
}
