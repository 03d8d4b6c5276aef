package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/storybus/storybus/bench"
	"github.com/storybus/storybus/internal/storetest"
)

// TestBenchDensity runs `storybus bench density` at two tiny levels: the
// replica, a storybus process of its own, starts twice over each level's
// workspaces, serves every one, and its memory is read; the report says
// so, and the table prints a line per level.
func TestBenchDensity(t *testing.T) {
	profiles := t.TempDir()
	rep, out := runDensity(t, "--workspaces", "1,3", "--connections", "2", "--settle", "0s", "--profile-dir", profiles)
	if rep.Connections != 2 || rep.Base.RSSMiB <= 0 || rep.Base.HeapMiB <= 0 || rep.Base.Goroutines <= 0 {
		t.Errorf("connections %d, empty replica %+v", rep.Connections, rep.Base)
	}
	if len(rep.Levels) != 2 || rep.Levels[0].Workspaces != 1 || rep.Levels[1].Workspaces != 3 {
		t.Fatalf("levels %+v; want 1 and 3 workspaces", rep.Levels)
	}
	for _, l := range rep.Levels {
		for name, s := range map[string]bench.Start{"first start": l.First, "restart": l.Restart} {
			if s.InForce <= 0 || s.Serving < s.InForce {
				t.Errorf("%d workspaces, %s: in force after %s, serving after %s", l.Workspaces, name, s.InForce, s.Serving)
			}
		}
		if l.Idle.RSSMiB <= 0 || l.Idle.HeapMiB <= 0 || l.Load == "" {
			t.Errorf("%d workspaces: idle %+v, load %q", l.Workspaces, l.Idle, l.Load)
		}
		if st, err := os.Stat(filepath.Join(profiles, "heap-"+strconv.Itoa(l.Workspaces)+".pprof")); err != nil || st.Size() == 0 {
			t.Errorf("%d workspaces: heap profile: %v", l.Workspaces, err)
		}
	}
	table := string(out)
	if !strings.Contains(table, "MiB per workspace") || strings.Count(table, "\n") < 6 {
		t.Errorf("table:\n%s", table)
	}
}

// TestBenchDensityOnACluster runs `storybus bench density --cluster 3`:
// the level's store is three nats-server processes, every stream and
// bucket with three replicas, as a pool's cluster, and the replica serves
// every workspace from it.
func TestBenchDensityOnACluster(t *testing.T) {
	rep, out := runDensity(t, "--cluster", "3", "--nats-server", storetest.NATSServer(t, "../.."),
		"--workspaces", "3", "--connections", "2", "--settle", "0s")
	if rep.Cluster != 3 || rep.Replicas != 3 || len(rep.Levels) != 1 || rep.Levels[0].Restart.Serving <= 0 || rep.Levels[0].Idle.RSSMiB <= 0 {
		t.Fatalf("cluster %d, replicas %d, levels %+v", rep.Cluster, rep.Replicas, rep.Levels)
	}
	if !strings.Contains(string(out), "3 local nats-server processes, every stream and bucket with 3 replicas") {
		t.Errorf("table:\n%s", out)
	}
}

// runDensity runs `storybus bench density` with args and --json, and
// returns its report and the table it printed.
func runDensity(t *testing.T, args ...string) (bench.DensityReport, []byte) {
	t.Helper()
	jsonPath := filepath.Join(t.TempDir(), "density.json")
	cmd := exec.Command(binary, append([]string{"bench", "density", "--json", jsonPath}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench density %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, stderr.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.DensityReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, b)
	}
	return rep, out
}
