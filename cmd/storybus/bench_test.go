package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/storybus/storybus/config/samples"
	"github.com/storybus/storybus/internal/testutil"
)

// benchReport is what a script reads of `storybus bench --json` against a
// running bus.
type benchReport struct {
	Settings struct {
		URL       string `json:"url"`
		Producers []int  `json:"producers"`
	} `json:"settings"`
	Levels []struct {
		Producers int `json:"producers"`
		Bus       struct {
			Accepted      int64            `json:"accepted"`
			AcceptedTotal int64            `json:"accepted_total"`
			Errors        int64            `json:"errors"`
			PerSecond     float64          `json:"messages_per_second"`
			P50Ms         float64          `json:"p50_ms"`
			P99Ms         float64          `json:"p99_ms"`
			Statuses      map[string]int64 `json:"http_statuses"`
		} `json:"bus"`
		Relay *json.RawMessage `json:"relay"`
	} `json:"levels"`
}

// runBench runs `storybus bench` with args and a JSON report, and returns
// the table and the report; it fails the test unless the run succeeded.
func runBench(t *testing.T, env []string, args ...string) (string, benchReport) {
	t.Helper()
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(binary, append([]string{"bench", "--json", jsonPath}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"STORYBUS_CLIENT_SECRET=", "STORYBUS_CA_FILE="}, env...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, stderr.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, b)
	}
	return string(out), rep
}

// checkEveryMessageAccepted checks that each level of the report measured
// exactly messages messages, every one answered 202.
func checkEveryMessageAccepted(t *testing.T, rep benchReport, levels []int, messages int64) {
	t.Helper()
	if len(rep.Levels) != len(levels) {
		t.Fatalf("%d levels in the report; want %v", len(rep.Levels), levels)
	}
	for i, l := range rep.Levels {
		if l.Producers != levels[i] {
			t.Errorf("level %d has %d producers; want %d", i, l.Producers, levels[i])
		}
		b := l.Bus
		if b.Accepted != messages || b.AcceptedTotal != messages || b.Errors != 0 {
			t.Errorf("%d producers: accepted %d (%d in all), %d errors; want %d accepted and no error", l.Producers, b.Accepted, b.AcceptedTotal, b.Errors, messages)
		}
		if len(b.Statuses) != 1 || b.Statuses["202"] != messages {
			t.Errorf("%d producers: answers by status %v; want 202 only, %d times", l.Producers, b.Statuses, messages)
		}
		if b.PerSecond <= 0 || b.P50Ms <= 0 || b.P99Ms < b.P50Ms {
			t.Errorf("%d producers: %.1f msgs/s, p50 %.3f ms, p99 %.3f ms", l.Producers, b.PerSecond, b.P50Ms, b.P99Ms)
		}
		if l.Relay != nil {
			t.Errorf("%d producers: a running bus's report has a relay phase: %s", l.Producers, *l.Relay)
		}
	}
}

// TestBenchDrivesARunningBus runs `storybus bench --url` against `storybus
// serve` with the connection's client credentials, at two levels of
// concurrency: every snapshot and event is accepted, and the table and the
// JSON report show each level.
func TestBenchDrivesARunningBus(t *testing.T) {
	dir := t.TempDir()
	b := startBus(t, writeConfig(t, dir), filepath.Join(dir, "data"), testutil.FreeAddr(t))
	url := "http://" + b.addr + "/v1/tenants/newsroom"
	table, rep := runBench(t, []string{"STORYBUS_CLIENT_SECRET=" + crashSecret},
		"--url", url, "--client-id", "cms", "--producers", "1,4", "--messages", "24", "--warmup", "0", "--stories", "12")
	checkEveryMessageAccepted(t, rep, []int{1, 4}, 24)
	if rep.Settings.URL != url {
		t.Errorf("settings name the URL %q; want %q", rep.Settings.URL, url)
	}
	for _, want := range []string{"target:  the running bus at " + url, "== 1 producers ==", "== 4 producers ==",
		"bus answers (warm-up included): 202 ×24", "scaling (the median round of each level)"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "relay") {
		t.Errorf("the table of a running bus shows a relay:\n%s", table)
	}

	// The same with a token got beforehand.
	_, rep = runBench(t, nil, "--url", url, "--token", b.token(t), "--system-id", "cms", "--producers", "2", "--messages", "8", "--warmup", "0")
	checkEveryMessageAccepted(t, rep, []int{2}, 8)
}

// TestBenchWithWrongCredentialsStopsAtOnce: a mistyped secret ends the run
// after one refused token request, instead of every producer asking again
// until the bus locks the client id out, and the connection's producers
// with it, for the lockout window.
func TestBenchWithWrongCredentialsStopsAtOnce(t *testing.T) {
	dir := t.TempDir()
	b := startBus(t, writeConfig(t, dir), filepath.Join(dir, "data"), testutil.FreeAddr(t))
	url := "http://" + b.addr + "/v1/tenants/newsroom"
	cmd := exec.Command(binary, "bench", "--url", url, "--client-id", "cms", "--producers", "4", "--messages", "40", "--warmup", "0")
	cmd.Env = append(os.Environ(), "STORYBUS_CLIENT_SECRET=wrong-secret-wrong-secret-wrong-secret", "STORYBUS_CA_FILE=")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 || !strings.Contains(string(out), "invalid_client") {
		t.Fatalf("bench with a wrong secret: exit %d, %v\n%s", code, err, out)
	}
	if strings.Contains(string(out), "producers ==") {
		t.Errorf("bench ran phases without a token:\n%s", out)
	}
	// The client id is not locked out: the right secret still gets tokens.
	_, rep := runBench(t, []string{"STORYBUS_CLIENT_SECRET=" + crashSecret},
		"--url", url, "--client-id", "cms", "--producers", "2", "--messages", "8", "--warmup", "0")
	checkEveryMessageAccepted(t, rep, []int{2}, 8)
}

// TestBenchDrivesABusOverTLS runs `storybus bench --url https://…` against
// `storybus dev --tls`, trusting its CA with --ca-file.
func TestBenchDrivesABusOverTLS(t *testing.T) {
	addr := testutil.FreeAddr(t)
	banner := startDev(t, "--tls", "--listen", addr, "--ops-listen", testutil.FreeAddr(t))
	_, rep := runBench(t, []string{"STORYBUS_CLIENT_SECRET=" + samples.CMSSecret},
		"--url", "https://"+addr+"/v1/tenants/"+samples.WorkspaceID, "--client-id", samples.CMSClientID,
		"--ca-file", banner.caFile, "--producers", "3", "--messages", "12", "--warmup", "0")
	checkEveryMessageAccepted(t, rep, []int{3}, 12)
}
