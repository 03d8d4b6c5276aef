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
// is reported on /readyz.
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

	replace("workspace: newsroom\nsigningKey: short\n")
	testutil.EventuallyTrue(t, "the reloaded configuration is served", 10*time.Second, func() bool {
		res, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode == http.StatusOK && strings.Contains(string(body), "rejected")
	})
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
