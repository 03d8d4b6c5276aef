package scale_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/storybus/storybus/internal/testutil"
)

// cpuProfileChunk is the length of each CPU profile the test takes of the
// operator while it converges: the profiles of a run are read together
// (`go tool pprof dir/cpu-*.pprof` merges them).
const cpuProfileChunk = 10 * time.Second

// profiler takes the operator's CPU profiles, one chunk after another,
// from its /debug/pprof at addr into dir, until stopped; then its heap.
type profiler struct {
	addr, dir string
	cancel    context.CancelFunc
	done      sync.WaitGroup
	taken     int
}

// startProfiling begins taking CPU profiles of the operator at addr into
// dir. A profile that fails is logged, not fatal: the profiles help read
// a run, they are not what it measures.
func startProfiling(t *testing.T, addr, dir string) *profiler {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("STORYBUS_SCALE_PROFILE: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &profiler{addr: addr, dir: dir, cancel: cancel}
	p.done.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			path := filepath.Join(dir, fmt.Sprintf("cpu-%03d.pprof", i))
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(cpuProfileChunk/time.Second))
			if err := fetchTo(context.Background(), url, path); err != nil {
				// The pprof server may not be up yet.
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			p.taken++
		}
	})
	return p
}

// stop waits for the CPU profile under way to end, takes a heap profile,
// and says where they are.
func (p *profiler) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	p.done.Wait()
	heap := filepath.Join(p.dir, "heap.pprof")
	if err := fetchTo(context.Background(), "http://"+p.addr+"/debug/pprof/heap", heap); err != nil {
		t.Logf("heap profile: %v", err)
	}
	t.Logf("operator profiles: %d CPU profiles of %s in %s (go tool pprof %s), heap when all Ready in %s",
		p.taken, cpuProfileChunk, p.dir, filepath.Join(p.dir, "cpu-*.pprof"), heap)
}

// fetchTo writes what url answers into path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, res.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// residentParts reads the resident memory of process pid by kind from
// /proc (Linux): anonymous (the Go heap, stacks, the runtime's own), file
// (the binary's pages read) and shared memory. Elsewhere it says why not.
func residentParts(pid int) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "not read: " + err.Error()
	}
	defer f.Close()
	var parts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		switch name {
		case "RssAnon", "RssFile", "RssShmem":
			if ok {
				parts = append(parts, name+" "+strings.Join(strings.Fields(value), " "))
			}
		}
	}
	if len(parts) == 0 {
		return "not in /proc"
	}
	return strings.Join(parts, ", ")
}

// peakResident is the highest resident memory of process pid so far, in
// bytes (the kernel's VmHWM); 0 when it cannot be read. Reading it there
// costs the measured process nothing, where sampling its /metrics every
// second had it render and compress its metrics for the measurement.
func peakResident(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// processCPU is the CPU time (user and system) of this test's process and
// of each of its child processes (the API server, etcd, NATS servers,
// the operator, pool replicas), by command name, or by the name labels
// gives its pid (the operator and the pool's replicas run one binary),
// read from /proc (Linux); empty elsewhere. Two readings, subtracted, say
// where the machine's cores went between them.
func processCPU(labels map[int]string) map[string]time.Duration {
	out := map[string]time.Duration{}
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := testutil.ProcStat(pid)
		if err != nil || (pid != self && st.Parent != self) {
			continue
		}
		name := st.Command
		if pid == self {
			name = "test"
		}
		if l, ok := labels[pid]; ok {
			name = l
		}
		out[name] += st.CPU
	}
	return out
}

// cpuSince formats the CPU each process name used since the reading
// before (made with the same labels), the largest first.
func cpuSince(before map[string]time.Duration, labels map[int]string) string {
	now := processCPU(labels)
	names := make([]string, 0, len(now))
	for n := range now {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(now[b]-before[b], now[a]-before[a]) })
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f s", n, (now[n]-before[n]).Seconds()))
	}
	return strings.Join(parts, ", ")
}
