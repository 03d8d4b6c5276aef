package bench

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/som"
)

// TestRun runs the whole benchmark briefly and checks that it measured
// something real: every phase accepted messages, nothing failed, every bus
// answer was 202, and each stream holds exactly what was acknowledged. It
// asserts no speed: the machines it runs on are shared and noisy.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for a few seconds")
	}
	o := DefaultOptions()
	o.Producers = 4
	o.Stories = 40
	o.Duration = time.Second
	o.Warmup = 200 * time.Millisecond
	o.DataDir = t.TempDir()
	rep, err := Run(t.Context(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := len(rep.phases()); got != len(Phases) {
		t.Errorf("the report has %d phases; want %d", got, len(Phases))
	}
	for _, ph := range rep.phases() {
		if ph.Accepted <= 0 || ph.PerSecond <= 0 {
			t.Errorf("%s: accepted %d messages, %.1f/s; want more than 0", ph.Name, ph.Accepted, ph.PerSecond)
		}
		if ph.Errors != 0 {
			t.Errorf("%s: %d errors: %v", ph.Name, ph.Errors, ph.ErrorSamples)
		}
		if uint64(ph.AcceptedTotal) != ph.StreamMessages {
			t.Errorf("%s: %d messages accepted, the stream holds %d", ph.Name, ph.AcceptedTotal, ph.StreamMessages)
		}
		if ph.P50Ms <= 0 || ph.P99Ms < ph.P50Ms {
			t.Errorf("%s: p50 %.3f ms, p99 %.3f ms", ph.Name, ph.P50Ms, ph.P99Ms)
		}
	}
	if len(rep.Bus.Statuses) != 1 || rep.Bus.Statuses[http.StatusAccepted] != rep.Bus.AcceptedTotal {
		t.Errorf("bus answers by status = %v; want only 202, %d times", rep.Bus.Statuses, rep.Bus.AcceptedTotal)
	}
	for name, r := range map[string]Ratio{"bus ÷ relay": rep.BusOverRelay, "bus ÷ relay two-write": rep.BusOverRelayTwoWrite,
		"bus ÷ raw single": rep.BusOverRaw, "bus ÷ three-write": rep.BusOverThreeWrite} {
		for _, v := range []float64{r.Throughput, r.P50, r.P99} {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("%s = %+v; want finite and positive", name, r)
			}
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("report as JSON: %v", err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bus (HTTP API)", "relay (HTTP, 1 write)", "relay two-write (HTTP)", "raw single publish", "three-write",
		"relay two-write  ", "--producers 4"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}

// TestSnapshotIsValid checks that the benchmark sends what a real producer
// would: valid SOM 1.0 of a typical size, accepted with no warnings.
func TestSnapshotIsValid(t *testing.T) {
	p := newProducer(0, 1, 1)
	for seq := 1; seq <= 3; seq++ {
		m := p.message()
		msg, err := som.Parse(m.body)
		if err != nil {
			t.Fatalf("snapshot %d: %v\n%s", seq, err, m.body)
		}
		refusals, warnings := som.Validate(msg)
		if len(refusals) != 0 || len(warnings) != 0 {
			t.Fatalf("snapshot %d: refusals %+v, warnings %+v\n%s", seq, refusals, warnings, m.body)
		}
		if msg.SequenceNumber != int64(seq) || msg.MessageID != m.id || msg.StoryID != m.story {
			t.Errorf("snapshot %d: sequence %d, id %q, story %q", seq, msg.SequenceNumber, msg.MessageID, msg.StoryID)
		}
		if n := len(m.body); n < 1000 || n > 2000 {
			t.Errorf("snapshot %d is %d bytes; want a typical 1–2 KB", seq, n)
		}
	}
}

// TestProducersOwnDistinctStories checks that no two producers share a
// story, so the bus phase never measures contention.
func TestProducersOwnDistinctStories(t *testing.T) {
	owner := map[string]int{}
	for w := range 7 {
		for _, s := range newProducer(w, 7, 30).stories {
			if o, ok := owner[s.id]; ok {
				t.Fatalf("story %s belongs to producers %d and %d", s.id, o, w)
			}
			owner[s.id] = w
		}
	}
	if len(owner) != 30 {
		t.Errorf("%d stories shared out; want 30", len(owner))
	}
}

// benchSync is the embedded JetStream's fsync mode in the Go benchmarks:
// go test -bench . -sync interval.
var benchSync = flag.String("sync", SyncAlways, "fsync mode of the Go benchmarks' embedded JetStream: always or interval")

// BenchmarkPublishHTTP publishes b.N snapshots through the bus's HTTP API
// with as many concurrent producers as `storybus bench` runs by default.
func BenchmarkPublishHTTP(b *testing.B) { benchmarkPhase(b, PhaseBus) }

// BenchmarkRawPublish publishes b.N messages of the same size with one
// JetStream publish each, the baseline of BenchmarkPublishHTTP.
func BenchmarkRawPublish(b *testing.B) { benchmarkPhase(b, PhaseRaw) }

func benchmarkPhase(b *testing.B, name PhaseName) {
	o := DefaultOptions()
	o.Sync = *benchSync
	o.DataDir = b.TempDir()
	if err := o.Validate(); err != nil {
		b.Fatal(err)
	}
	e, err := newEnv(b.Context(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.close)
	t, err := e.open(b.Context(), name, "bench-"+string(name))
	if err != nil {
		b.Fatal(err)
	}
	parallelism := max(1, o.Producers/runtime.GOMAXPROCS(0))
	workers := parallelism * runtime.GOMAXPROCS(0)
	var next, failed atomic.Int64
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := newProducer(int(next.Add(1)-1), workers, o.Stories)
		for pb.Next() {
			m := p.message()
			if _, err := t.publish(b.Context(), m); err != nil {
				if failed.Add(1) == 1 {
					b.Error(err)
				}
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	t.settle()
	if failed.Load() > 0 {
		return
	}
	if n, err := t.streamMessages(b.Context()); err != nil || n != uint64(b.N) {
		b.Errorf("the stream holds %d messages (%v); want %d", n, err, b.N)
	}
}
