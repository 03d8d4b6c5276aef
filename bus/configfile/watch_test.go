package configfile_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/configfile"
	"github.com/storybus/storybus/internal/filewatch"
	"github.com/storybus/storybus/internal/testutil"
)

const watchedDoc = "workspace: w1\nsigningKey: 0123456789abcdef0123456789abcdef\nownership: {notOwner: %s}\n"

// replaceFile writes content to a temporary file and renames it over path,
// as editors and kubelet do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type change struct {
	w   *config.Workspace
	err error
}

// watch loads path, watches it and returns the changes it reports.
func watch(t *testing.T, path string) <-chan change {
	t.Helper()
	loaded, err := configfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan change, 64)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	err = configfile.Watch(ctx, path, loaded, func(w *config.Workspace, err error) error {
		changes <- change{w, err}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return changes
}

func next(t *testing.T, changes <-chan change, within time.Duration) change {
	t.Helper()
	select {
	case c := <-changes:
		return c
	case <-time.After(within):
		t.Fatalf("no reload within %s", within)
		return change{}
	}
}

func TestWatchReloadsOnChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workspace.yaml")
	replaceFile(t, path, fmt.Sprintf(watchedDoc, "tolerate"))
	changes := watch(t, path)
	replaceFile(t, path, fmt.Sprintf(watchedDoc, "refuse"))
	if c := next(t, changes, 10*time.Second); c.err != nil || c.w.Ownership.NotOwner != config.NotOwnerRefuse {
		t.Fatalf("reload: %+v", c)
	}
	replaceFile(t, path, "workspace: w1\nsigningKey: short\n")
	if c := next(t, changes, 10*time.Second); c.err == nil {
		t.Fatal("a broken file reloaded without an error")
	}
}

// TestWatchIgnoresEverythingButItsFiles writes, beside the configuration, a
// log file, a data directory and the configuration's own unchanged bytes:
// none of it is a change. The first change reported is the real edit.
func TestWatchIgnoresEverythingButItsFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "workspace.yaml")
	replaceFile(t, path, fmt.Sprintf(watchedDoc, "tolerate"))
	changes := watch(t, path)

	logFile, err := os.OpenFile(filepath.Join(dir, "bus.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	data := filepath.Join(dir, "data")
	// Each round is longer than the quiet period, so a watcher that read on
	// any event would read (and report) every round.
	for i := range 12 {
		if _, err := fmt.Fprintf(logFile, "line %d\n", i); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(data, "jetstream"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, fmt.Sprintf("blk-%d", i)), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		replaceFile(t, path, fmt.Sprintf(watchedDoc, "tolerate")) // same content
		_ = os.Chtimes(path, time.Now(), time.Now())
		select {
		case c := <-changes:
			t.Fatalf("reloaded with nothing changed (round %d): %+v", i, c)
		case <-time.After(2 * filewatch.Quiet):
		}
	}
	replaceFile(t, path, fmt.Sprintf(watchedDoc, "refuse"))
	if c := next(t, changes, 10*time.Second); c.err != nil || c.w.Ownership.NotOwner != config.NotOwnerRefuse {
		t.Fatalf("the first change reported is not the edit: %+v", c)
	}
}

// TestWatchAppliesAnEditWhileANeighbourIsWritten edits the configuration
// while another file in its directory is written every 50 ms: the edit is
// read within filewatch.MaxDelay, not when the writer stops.
func TestWatchAppliesAnEditWhileANeighbourIsWritten(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "workspace.yaml")
	replaceFile(t, path, fmt.Sprintf(watchedDoc, "tolerate"))
	changes := watch(t, path)

	testutil.KeepWriting(t, filepath.Join(dir, "neighbour.log"), 50*time.Millisecond)

	for _, mode := range []string{"refuse", "tolerate", "refuse"} {
		edited := time.Now()
		replaceFile(t, path, fmt.Sprintf(watchedDoc, mode))
		// The bound is filewatch.MaxDelay; the deadline is loose for a busy
		// machine, but far shorter than the writer's 30 s.
		c := next(t, changes, 3*time.Second)
		if c.err != nil || c.w.Ownership.NotOwner != mode {
			t.Fatalf("reload: %+v", c)
		}
		t.Logf("edit read after %s with a neighbour written every 50ms", time.Since(edited))
	}
}

// TestWatchReadsAFileWrittenWithoutPause rewrites the configuration itself
// every 50 ms, never quiet for filewatch.Quiet: it is read all the same while
// the writes go on.
func TestWatchReadsAFileWrittenWithoutPause(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workspace.yaml")
	replaceFile(t, path, fmt.Sprintf(watchedDoc, "tolerate"))
	changes := watch(t, path)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	modes := []string{"refuse", "tolerate"}
	for i := 0; i < 200; i++ { // 10 s at most
		<-tick.C
		replaceFile(t, path, fmt.Sprintf(watchedDoc, modes[i%2]))
		select {
		case c := <-changes:
			if c.err != nil {
				t.Fatal(c.err)
			}
			t.Logf("read after %d writes 50ms apart", i+1)
			return
		default:
		}
	}
	t.Fatal("a file written every 50ms was not read while the writes went on")
}

// TestWatchReloadsAKeyFileElsewhere changes only the signing key file, in
// another directory than the configuration: that is a change; another
// file in the key's directory is not.
func TestWatchReloadsAKeyFileElsewhere(t *testing.T) {
	confDir, keyDir := t.TempDir(), t.TempDir()
	key := filepath.Join(keyDir, "signing.key")
	replaceFile(t, key, "first-key-0123456789abcdef0123456789")
	path := filepath.Join(confDir, "workspace.yaml")
	replaceFile(t, path, "workspace: w1\nsigningKeyFile: "+key+"\n")
	changes := watch(t, path)

	for i := range 6 {
		replaceFile(t, filepath.Join(keyDir, "other.key"), fmt.Sprint(i))
		select {
		case c := <-changes:
			t.Fatalf("reloaded for a neighbour of the key file: %+v", c)
		case <-time.After(2 * filewatch.Quiet):
		}
	}
	replaceFile(t, key, "second-key-0123456789abcdef0123456789")
	if c := next(t, changes, 10*time.Second); c.err != nil || c.w.SigningKey != "second-key-0123456789abcdef0123456789" {
		t.Fatalf("key file change: %+v", c)
	}
	// A key file that disappears is a change too, reported as an error.
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if c := next(t, changes, 10*time.Second); c.err == nil || !strings.Contains(c.err.Error(), "signingKeyFile") {
		t.Fatalf("a removed key file: %+v", c)
	}
}

// TestWatchRetriesContentNotApplied: when onChange says the content was not
// applied, the next event on the file passes the same content again.
func TestWatchRetriesContentNotApplied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workspace.yaml")
	replaceFile(t, path, fmt.Sprintf(watchedDoc, "tolerate"))
	loaded, err := configfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan *config.Workspace, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := true
	err = configfile.Watch(ctx, path, loaded, func(w *config.Workspace, err error) error {
		calls <- w
		if first {
			first = false
			return fmt.Errorf("store timed out")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	refuse := fmt.Sprintf(watchedDoc, "refuse")
	replaceFile(t, path, refuse)
	c := change{w: nil}
	select {
	case c.w = <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("no reload")
	}
	replaceFile(t, path, refuse) // same content, not applied yet
	select {
	case c.w = <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("content not applied was not passed again")
	}
	if c.w == nil || c.w.Ownership.NotOwner != config.NotOwnerRefuse {
		t.Fatalf("retry: %+v", c)
	}
}
