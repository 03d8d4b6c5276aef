package bench

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

// TestRun runs the whole benchmark briefly, every phase at two levels of
// concurrency, and checks that it measured something real: every phase
// accepted the messages asked for, nothing failed, every HTTP answer was
// 202, and each stream holds exactly what was acknowledged. It asserts no
// speed: the machines it runs on are shared and noisy.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for a few seconds")
	}
	o := DefaultOptions()
	o.Producers = []int{1, 4}
	o.Stories = 40
	o.Messages = 60
	o.Warmup = 100 * time.Millisecond
	o.DataDir = t.TempDir()
	report, err := Run(t.Context(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(report.Levels) != 2 || report.Levels[0].Producers != 1 || report.Levels[1].Producers != 4 {
		t.Fatalf("levels %+v; want two, of 1 and 4 producers", report.Levels)
	}
	for _, rep := range report.Levels {
		if got := len(rep.phases()); got != len(Phases) {
			t.Errorf("%d producers: the report has %d phases; want %d", rep.Producers, got, len(Phases))
		}
		for _, ph := range rep.phases() {
			if ph.Accepted != int64(o.Messages) || ph.PerSecond <= 0 {
				t.Errorf("%d producers, %s: accepted %d messages, %.1f/s; want %d", rep.Producers, ph.Name, ph.Accepted, ph.PerSecond, o.Messages)
			}
			if ph.Errors != 0 {
				t.Errorf("%d producers, %s: %d errors: %v", rep.Producers, ph.Name, ph.Errors, ph.ErrorSamples)
			}
			if uint64(ph.AcceptedTotal) != ph.StreamMessages {
				t.Errorf("%d producers, %s: %d messages accepted, the stream holds %d", rep.Producers, ph.Name, ph.AcceptedTotal, ph.StreamMessages)
			}
			if ph.P50Ms <= 0 || ph.P99Ms < ph.P50Ms {
				t.Errorf("%d producers, %s: p50 %.3f ms, p99 %.3f ms", rep.Producers, ph.Name, ph.P50Ms, ph.P99Ms)
			}
			if viaHTTP := ph.Name == PhaseBus || ph.Name == PhaseRelay || ph.Name == PhaseRelayTwoWrite; viaHTTP &&
				(len(ph.Statuses) != 1 || ph.Statuses[http.StatusAccepted] != ph.AcceptedTotal) {
				t.Errorf("%d producers, %s: answers by status = %v; want only 202, %d times", rep.Producers, ph.Name, ph.Statuses, ph.AcceptedTotal)
			}
		}
		for name, r := range map[string]Ratio{"bus ÷ relay": rep.BusOverRelay, "bus ÷ relay two-write": rep.BusOverRelayTwoWrite,
			"bus ÷ raw single": rep.BusOverRaw, "bus ÷ three-write": rep.BusOverThreeWrite} {
			for _, v := range []float64{r.Throughput, r.P50, r.P99} {
				if !(v > 0) || math.IsInf(v, 0) {
					t.Errorf("%d producers: %s = %+v; want finite and positive", rep.Producers, name, r)
				}
			}
		}
	}
	if _, err := json.Marshal(report); err != nil {
		t.Errorf("report as JSON: %v", err)
	}
	var table bytes.Buffer
	if err := report.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bus (HTTP API)", "relay (HTTP, 1 write)", "relay two-write (HTTP)", "raw single publish", "three-write",
		"relay two-write  ", "--producers 1,4", "scaling (the median round of each level)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}

// TestMessagesAreValid checks that the benchmark sends what a real
// producer would: valid SOM 1.0 of a typical size, accepted with no
// warnings; snapshots in sequence, and with events one message in four a
// story.event about the story snapshotted last.
func TestMessagesAreValid(t *testing.T) {
	for _, events := range []bool{false, true} {
		p := newProducer(0, 1, 2, generator{systemID: "cms", storyPrefix: "run-1a2b-", events: events})
		seq := map[string]int64{}
		last := ""
		for i := 1; i <= 12; i++ {
			m := p.message()
			msg, err := som.Parse(m.body)
			if err != nil {
				t.Fatalf("message %d: %v\n%s", i, err, m.body)
			}
			refusals, warnings := som.Validate(msg)
			if len(refusals) != 0 || len(warnings) != 0 {
				t.Fatalf("message %d: refusals %+v, warnings %+v\n%s", i, refusals, warnings, m.body)
			}
			if msg.MessageID != m.id || msg.StoryID != m.story || msg.SystemID != "cms" || !strings.HasPrefix(m.story, "run-1a2b-") {
				t.Errorf("message %d: id %q, story %q, system %q", i, msg.MessageID, msg.StoryID, msg.SystemID)
			}
			wantEvent := events && i%4 == 0
			switch {
			case wantEvent:
				if msg.MessageType != som.TypeStoryEvent || m.story != last {
					t.Errorf("message %d is a %s about %s; want a story.event about %s", i, msg.MessageType, m.story, last)
				}
			case msg.MessageType != som.TypeStoryContext:
				t.Errorf("message %d is a %s; want a story.context", i, msg.MessageType)
			default:
				seq[m.story]++
				if msg.SequenceNumber != seq[m.story] {
					t.Errorf("snapshot %d of %s has sequence %d; want %d", i, m.story, msg.SequenceNumber, seq[m.story])
				}
				if n := len(m.body); n < 1000 || n > 2000 {
					t.Errorf("snapshot %d is %d bytes; want a typical 1–2 KB", i, n)
				}
				last = m.story
			}
		}
	}
}

// TestProducersOwnDistinctStories checks that no two producers share a
// story, so the bus phase never measures contention.
func TestProducersOwnDistinctStories(t *testing.T) {
	owner := map[string]int{}
	for w := range 7 {
		for _, s := range newProducer(w, 7, 30, generator{storyPrefix: "story-"}).stories {
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

// BenchmarkRelayHTTP posts b.N snapshots to the relay, the same HTTP stack
// and client doing one JetStream publish each: the HTTP floor under
// BenchmarkPublishHTTP.
func BenchmarkRelayHTTP(b *testing.B) { benchmarkPhase(b, PhaseRelay) }

// BenchmarkRelayTwoWriteHTTP is BenchmarkRelayHTTP with a record create
// before each publish.
func BenchmarkRelayTwoWriteHTTP(b *testing.B) { benchmarkPhase(b, PhaseRelayTwoWrite) }

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
	parallelism := max(1, o.Producers[0]/runtime.GOMAXPROCS(0))
	workers := parallelism * runtime.GOMAXPROCS(0)
	var next, failed atomic.Int64
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := newProducer(int(next.Add(1)-1), workers, o.Stories, generator{systemID: SystemID, storyPrefix: "story-"})
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

func TestRoundsAlternateThePhaseOrder(t *testing.T) {
	o := Options{Phases: []PhaseName{PhaseRelayTwoWrite, PhaseBus, PhaseRaw}}
	want := map[int][]PhaseName{
		1: {PhaseBus, PhaseRelayTwoWrite, PhaseRaw},
		2: {PhaseRaw, PhaseRelayTwoWrite, PhaseBus},
		3: {PhaseBus, PhaseRelayTwoWrite, PhaseRaw},
	}
	for r, phases := range want {
		if got := o.roundPhases(r); !slices.Equal(got, phases) {
			t.Errorf("round %d runs %v, want %v", r, got, phases)
		}
	}
	if got := o.phases(); !slices.Equal(got, want[1]) {
		t.Errorf("a second round changed the phases' own order: %v", got)
	}
}

// TestRunOnALocalCluster starts three nats-server processes as --cluster
// does and runs the bus and the relays against them briefly, over two
// workspaces: every message accepted and in its stream, every stream and
// bucket replicated three times. It asserts no speed.
func TestRunOnALocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes")
	}
	o := DefaultOptions()
	o.Cluster = 3
	o.NATSServer = storetest.NATSServer(t, "..")
	o.DataDir = t.TempDir()
	c, err := startCluster(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)

	o.Cluster, o.NATSURL = 0, c.url()
	e, err := newEnv(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if e.bus().srv.SoleWriter() {
		t.Error("the bus on a cluster is its topics' sole writer; want every snapshot a compare-and-swap")
	}
	tg, err := e.open(t.Context(), PhaseBus, "bench-replicas")
	if err != nil {
		t.Fatal(err)
	}
	// On a cluster the benchmark connects as a pool's replica: the
	// workspace's records are in the shared bucket of its window.
	for _, name := range []string{store.StreamName("bench-replicas"), "KV_" + store.SharedRecordsBucket(config.MinIdempotencyWindow)} {
		st, err := e.st.JS.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if info := st.CachedInfo(); info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: %d replicas configured, cluster %+v; want 3, a leader and two followers", name, info.Config.Replicas, info.Cluster)
		}
	}
	if err := tg.remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.close()

	o.Producers = []int{4}
	o.Workspaces = 2
	o.Stories = 20
	o.Messages = 40
	o.Warmup = 0
	o.Phases = []PhaseName{PhaseBus, PhaseRelay, PhaseRelayTwoWrite}
	// Two buses behind the per-request front, as a pool's replicas: a
	// story's second snapshot goes through the bus that did not write its
	// first, whose view of the head is behind.
	o.BusReplicas = 2
	rep, err := Run(t.Context(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	l := rep.Levels[0]
	for _, ph := range l.phases() {
		if ph.Accepted != int64(o.Messages) || ph.Errors != 0 || uint64(ph.AcceptedTotal) != ph.StreamMessages {
			t.Errorf("%s: accepted %d of %d, %d errors %v, the streams hold %d", ph.Name, ph.Accepted, o.Messages, ph.Errors, ph.ErrorSamples, ph.StreamMessages)
		}
		if len(ph.Statuses) != 1 || ph.Statuses[http.StatusAccepted] != ph.AcceptedTotal {
			t.Errorf("%s: answers by status = %v; want only 202", ph.Name, ph.Statuses)
		}
	}
	// The store round trips per message: one publish; a record create and
	// a publish; and for the bus those, a head read for every story's
	// first snapshot (each story here gets two), and for a second one
	// through the other bus, what its head being behind costs (the
	// publish refused, the head read from the leader, the record read and
	// renamed, the publish again).
	for _, c := range []struct {
		ph       Phase
		min, max float64
	}{{l.Relay, 1, 1}, {l.RelayTwoWrite, 2, 2}, {l.Bus, 2, 6}} {
		if c.ph.StoreRequests < c.min || c.ph.StoreRequests > c.max {
			t.Errorf("%s: %.2f store requests per message; want %.0f to %.0f", c.ph.Name, c.ph.StoreRequests, c.min, c.max)
		}
	}
	if r := l.BusOverRelayTwoWrite; !(r.Throughput > 0) || !(r.P99 > 0) {
		t.Errorf("bus ÷ relay two-write = %+v; want both measured", r)
	}
	if l.Bus.Writes != "2 replicated" || rep.Settings.Replicas != 3 || rep.Settings.Workspaces != 2 || rep.Settings.BusReplicas != 2 {
		t.Errorf("bus writes %q, settings %+v; want 2 replicated writes, 3 replicas, 2 workspaces", l.Bus.Writes, rep.Settings)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--nats-url " + c.url(), "--replicas 3", "--workspaces 2", "--bus-replicas 2", "3 replicas", "2 workspace(s) per phase", "2 bus replicas"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}
