package config_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/config"
)

func TestWatchReloadsOnChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "workspace.yaml")
	doc := "workspace: w1\nsigningKey: 0123456789abcdef0123456789abcdef\nownership: {notOwner: %s}\n"
	write := func(content string) {
		// Write then rename, as editors and kubelet do.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(strings.Replace(doc, "%s", "tolerate", 1))
	type change struct {
		w   *config.Workspace
		err error
	}
	changes := make(chan change, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := config.Watch(ctx, path, 20*time.Millisecond, func(w *config.Workspace, err error) { changes <- change{w, err} }); err != nil {
		t.Fatal(err)
	}
	next := func() change {
		t.Helper()
		select {
		case c := <-changes:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no reload within 10s")
			return change{}
		}
	}
	write(strings.Replace(doc, "%s", "refuse", 1))
	if c := next(); c.err != nil || c.w.Ownership.NotOwner != config.NotOwnerRefuse {
		t.Fatalf("reload: %+v", c)
	}
	write("workspace: w1\nsigningKey: short\n")
	if c := next(); c.err == nil {
		t.Fatal("a broken file reloaded without an error")
	}
}
