package main_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/storybus/storybus/internal/kubelet"
	"github.com/storybus/storybus/internal/testutil"
)

// TestServeReloadsItsConfigurationFile edits the workspace file of a
// running bus: a narrowed grant takes effect within seconds without a
// restart, and a broken file leaves the previous configuration serving and
// is reported on /readyz and counted, under its workspace id when the file
// names one and under its path when it does not decode.
func TestServeReloadsItsConfigurationFile(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir)
	addr, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	b := startBus(t, cfg, filepath.Join(dir, "data"), addr, "--ops-listen", ops)
	token := b.token(t)
	seq := 0
	snapshot := func(int) []byte {
		seq++ // every attempt is a newer snapshot: an accepted one never makes the next stale
		return []byte(fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"reload","sequence_number":%d,"state":"draft","headline":"Harbour bridge approved"}}`, uuid.NewString(), seq))
	}
	if status, _, err := b.send(token, snapshot(1)); err != nil || status != http.StatusAccepted {
		t.Fatalf("before the edit: %d %v", status, err)
	}

	original, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	replace := func(content string) {
		tmp := cfg + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
	}
	replace(strings.Replace(string(original), `messageTypes: ["*"]`, `messageTypes: [story.event]`, 1))
	testutil.EventuallyTrue(t, "the reloaded configuration is served", 10*time.Second, func() bool {
		status, _, err := b.send(token, snapshot(2))
		return err == nil && status == http.StatusForbidden
	})

	get := func(path string) string {
		res, err := http.Get("http://" + ops + path)
		if err != nil {
			return ""
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			return ""
		}
		return string(body)
	}
	// A file that decodes is reported under its workspace id.
	replace("workspace: newsroom\nsigningKey: short\n")
	rejected := "workspace newsroom: configuration rejected, previous one in force: " + cfg + ": "
	testutil.EventuallyTrue(t, "/readyz reports the rejected configuration under its workspace", 10*time.Second, func() bool {
		return strings.Contains(get("/readyz"), "\n"+rejected)
	})
	if metrics := get("/metrics"); !strings.Contains(metrics, `storybus_config_reload_errors_total{workspace="newsroom"} 1`) {
		t.Fatalf("the reload error is not counted under the workspace id:\n%s", grepLines(metrics, "reload_errors"))
	}
	// One that does not decode is reported under the file's path, in
	// place of the previous report.
	replace("connections: [cms\n")
	testutil.EventuallyTrue(t, "/readyz reports the rejected configuration under its file", 10*time.Second, func() bool {
		body := get("/readyz")
		return strings.Contains(body, "\nworkspace "+cfg+": configuration rejected, previous one in force: "+cfg+": ") &&
			!strings.Contains(body, rejected)
	})
	if metrics := get("/metrics"); !strings.Contains(metrics, fmt.Sprintf(`storybus_config_reload_errors_total{workspace=%q} 1`, cfg)) {
		t.Fatalf("the reload error is not counted under the file:\n%s", grepLines(metrics, "reload_errors"))
	}
	// The previous configuration still serves: the narrowed grant holds.
	if status, _, err := b.send(token, snapshot(2)); err != nil || status != http.StatusForbidden {
		t.Fatalf("after a broken file: %d %v", status, err)
	}
	replace(string(original))
	last := 0
	testutil.EventuallyTrue(t, "the reloaded configuration is served", 10*time.Second, func() bool {
		status, _, err := b.send(token, snapshot(2))
		last = status
		return err == nil && status == http.StatusAccepted
	})
	if last != http.StatusAccepted {
		t.Fatalf("after restoring the file: %d", last)
	}
}

// TestServeReloadsAKubeletVolumeSwap serves a workspace from a directory
// laid out as kubelet lays out a pod's projected ConfigMap and Secret volume
// (files are symlinks through "..data", and an update swaps that symlink):
// a narrowed grant in a swapped configuration takes effect within seconds,
// and so does a swapped signing key, which is a file the configuration
// names, not the configuration itself.
func TestServeReloadsAKubeletVolumeSwap(t *testing.T) {
	root := t.TempDir()
	vol := filepath.Join(root, "config")
	cfg := filepath.Join(vol, "workspace.yaml")
	workspace := func(messageTypes string) []byte {
		return []byte(fmt.Sprintf(`apiVersion: bus.storybus.io/v1alpha1
kind: WorkspaceConfig
workspace: newsroom
signingKeyFile: %s
connections:
  - name: cms
    secretHash: sha256:%s
    grant:
      publish: {systemIDs: [cms], messageTypes: %s}
`, filepath.Join(vol, "signingKey"), sha256hex(crashSecret), messageTypes))
	}
	swap := func(ws []byte, key string) {
		t.Helper()
		if err := kubelet.WriteVolume(vol, map[string][]byte{"workspace.yaml": ws, "signingKey": []byte(key)}, 0o440); err != nil {
			t.Fatal(err)
		}
	}
	firstKey := "first-signing-key-0123456789abcdef0123"
	swap(workspace(`["*"]`), firstKey)
	addr := testutil.FreeAddr(t)
	b := startBus(t, cfg, filepath.Join(root, "data"), addr)
	token := b.token(t)
	seq := 0
	snapshot := func() []byte {
		seq++
		return []byte(fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"swap","sequence_number":%d,"state":"draft","headline":"Harbour bridge approved"}}`, uuid.NewString(), seq))
	}
	if status, _, err := b.send(token, snapshot()); err != nil || status != http.StatusAccepted {
		t.Fatalf("before the swap: %d %v", status, err)
	}

	swap(workspace(`[story.event]`), firstKey)
	testutil.EventuallyTrue(t, "the reloaded configuration is served", 10*time.Second, func() bool {
		status, _, err := b.send(token, snapshot())
		return err == nil && status == http.StatusForbidden
	})

	// Only the Secret's part changes: tokens signed with the old key stop
	// working, and a token signed with the new one authenticates (the
	// narrowed grant still refuses the message).
	swap(workspace(`[story.event]`), "second-signing-key-0123456789abcdef012")
	testutil.EventuallyTrue(t, "the reloaded configuration is served", 10*time.Second, func() bool {
		status, _, err := b.send(token, snapshot())
		return err == nil && status == http.StatusUnauthorized
	})
	if status, _, err := b.send(b.token(t), snapshot()); err != nil || status != http.StatusForbidden {
		t.Fatalf("a token signed with the new key: %d %v", status, err)
	}
}

// TestServeReloadsOnlyWhenItsConfigurationChanges runs a bus whose data
// directory is inside its configuration's directory, with a log file
// beside the configuration: the store's writes and the log's lines cause no
// reload. An edit made while the log is written every 50 ms is in force
// within a second (the deadline is loose for a busy machine), reloaded
// once.
func TestServeReloadsOnlyWhenItsConfigurationChanges(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir)
	addr := testutil.FreeAddr(t)
	b := startBus(t, cfg, filepath.Join(dir, "data"), addr)
	reloads := func() int { return strings.Count(b.logs.String(), `"msg":"workspace configuration reloaded"`) }
	token := b.token(t)
	seq := 0
	send := func(story string) int {
		t.Helper()
		seq++
		body := []byte(fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":%q,"sequence_number":%d,"state":"draft","headline":"Harbour bridge approved"}}`, uuid.NewString(), story, seq))
		status, _, err := b.send(token, body)
		if err != nil {
			t.Fatal(err)
		}
		return status
	}

	// The embedded JetStream writes its files under the configuration's
	// directory, 20 messages 150 ms apart (longer than the quiet period).
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for range 20 {
		<-tick.C
		if status := send("store"); status != http.StatusAccepted {
			t.Fatalf("publish: %d", status)
		}
	}
	if n := reloads(); n != 0 {
		t.Fatalf("%d reloads while the store wrote beside the configuration", n)
	}

	// A log file beside the configuration, a line every 150 ms, then every
	// 50 ms.
	logFile, err := os.OpenFile(filepath.Join(dir, "storybus.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	for i := range 20 {
		<-tick.C
		if _, err := fmt.Fprintf(logFile, "line %d\n", i); err != nil {
			t.Fatal(err)
		}
	}
	if n := reloads(); n != 0 {
		t.Fatalf("%d reloads while a log file beside the configuration was written", n)
	}
	testutil.KeepWriting(t, filepath.Join(dir, "storybus.log"), 50*time.Millisecond)

	original, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	narrowed := strings.Replace(string(original), `messageTypes: ["*"]`, `messageTypes: [story.event]`, 1)
	if err := os.WriteFile(cfg+".tmp", []byte(narrowed), 0o600); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	if err := os.Rename(cfg+".tmp", cfg); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, "the edit is in force while the log is written", 5*time.Second, func() bool {
		return send("edit") == http.StatusForbidden
	})
	t.Logf("edit in force after %s", time.Since(edited))
	// The reload is logged just after it is in force.
	testutil.EventuallyTrue(t, "the reload is logged", 5*time.Second, func() bool { return reloads() >= 1 })
	if n := reloads(); n != 1 {
		t.Fatalf("%d reloads for one edit, want 1", n)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
