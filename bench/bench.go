// Package bench is the publish benchmark of SPEC §12: in one process and
// one run it measures the bus's publish API over HTTP side by side with
// baselines on the same embedded JetStream and the same kind of connection,
// so that their ratio says what the bus costs on this machine:
//
//   - bus: producers POST SOM 1.0 story.context snapshots to the bus's
//     HTTP API, which validates, records and publishes each one (a
//     snapshot's record is never marked: its story subject proves it);
//   - relay: the same requests to a bare handler on the bus's HTTP stack
//     that decodes message_id and story_id and does one JetStream publish
//     to the story subject: the floor of any HTTP front of JetStream;
//   - relay two-write: the relay with a records-bucket create before the
//     publish, the floor of one that records a message before publishing;
//   - raw single: one durable JetStream publish per message, de-duplicated
//     on Nats-Msg-Id, to a stream configured like the bus's topic;
//   - three-write: the naive idempotent publish, a record create, a publish
//     and a record update in sequence per message.
//
// Run runs them in that order (in rounds when asked, each on fresh streams,
// the order reversed in every second round),
// at each level of concurrency asked for, and returns a Report with
// messages per second, latency percentiles, errors and the ratios. With
// Options.NATSURL, or the local nats-server processes of Options.Cluster,
// the same phases write to a replicated NATS cluster, as a pool does. With
// Options.Remote it drives a running bus instead, the bus phase alone, so
// that a platform team can size a workspace. `storybus bench` is its
// command line.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sync modes of the embedded JetStream, as in `storybus serve --sync`.
const (
	// SyncAlways fsyncs every write before it is acknowledged.
	SyncAlways = "always"
	// SyncInterval fsyncs periodically (Options.SyncInterval, else
	// nats-server's default).
	SyncInterval = "interval"
)

// PhaseName names one of the ways of publishing the benchmark compares.
type PhaseName string

// The phases, in the order a round runs them.
const (
	// PhaseBus publishes through the bus's HTTP API.
	PhaseBus PhaseName = "bus"
	// PhaseRelay posts to the relay: one publish per message.
	PhaseRelay PhaseName = "relay"
	// PhaseRelayTwoWrite posts to the relay that creates the message's
	// record before the publish.
	PhaseRelayTwoWrite PhaseName = "relay-two-write"
	// PhaseRaw is one JetStream publish per message.
	PhaseRaw PhaseName = "raw-single"
	// PhaseThreeWrite is record create, publish, record update per message.
	PhaseThreeWrite PhaseName = "three-write"
)

// Phases lists every phase in the order a round runs them.
var Phases = []PhaseName{PhaseBus, PhaseRelay, PhaseRelayTwoWrite, PhaseRaw, PhaseThreeWrite}

// Options configure a run. DefaultOptions gives the command line's
// defaults; a zero Warmup means no warm-up.
type Options struct {
	// Sync is the embedded JetStream's fsync mode: SyncAlways or SyncInterval.
	Sync string
	// SyncInterval is the fsync period with SyncInterval; 0 keeps
	// nats-server's default.
	SyncInterval time.Duration
	// Producers are the levels of concurrency: at each, every phase runs
	// with that many concurrent writers.
	Producers []int
	// Stories is how many stories the producers share out; each story
	// belongs to one producer, so writers never contend on a story.
	Stories int
	// Duration is how long each phase is measured, after Warmup.
	Duration time.Duration
	// Warmup is how long each phase runs before it is measured.
	Warmup time.Duration
	// Messages, when above 0, measures this many messages per phase
	// instead of Duration.
	Messages int
	// Phases are the phases a round runs, in Phases' order; empty runs
	// them all.
	Phases []PhaseName
	// Rounds repeats every phase, each on fresh streams; the report's
	// headline is the median round.
	Rounds int
	// DataDir is where the store's fresh temporary directory is made;
	// empty is the system's temporary directory. It should be on the disk
	// under test: a memory file system makes fsync free.
	DataDir string
	// NATSURL, when set, is an external NATS cluster (its client URLs,
	// comma-separated) that the bus and the baselines write to instead of
	// an embedded JetStream, every stream and bucket with Replicas
	// replicas; the cluster's own configuration decides its fsyncs, so
	// Sync and SyncInterval are unused.
	NATSURL string
	// Cluster, when above 0, starts that many nats-server processes of
	// NATSServer clustered with JetStream on loopback, each fsyncing as
	// Sync says and storing under DataDir, runs the benchmark against them
	// as with NATSURL, and stops them at its end.
	Cluster int
	// NATSServer is the nats-server binary Cluster starts: a path, or a
	// name looked up in PATH.
	NATSServer string
	// Replicas of every stream and bucket on a cluster; 0 is 3, or the
	// size of a smaller Cluster. The embedded store has 1.
	Replicas int
	// BusReplicas, on a cluster, is how many buses the bus phase runs,
	// each with a connection of its own to the cluster as pool replicas
	// have, behind a front that sends each request to the next one in
	// turn (as a Gateway balances per request): a story's snapshots are
	// then written through every replica in turn. 0 or 1 is one bus.
	BusReplicas int
	// Workspaces is how many workspaces each phase writes to, each with
	// its own stream and bucket (and, for the bus, connection and token);
	// producer i writes to workspace i modulo Workspaces.
	Workspaces int
	// Remote, when set, is a running bus to drive instead of the embedded
	// one: the bus phase alone, Sync, SyncInterval, Phases and DataDir
	// unused.
	Remote *Remote
	// CPUProfile, when set, receives a CPU profile (pprof) of this process
	// during the first bus phase: the bus, and the load generator and the
	// store's client beside it (on a cluster, not the nats-servers).
	CPUProfile io.Writer
	// Logger receives the bus's logs; nil discards them.
	Logger *slog.Logger
	// Progress, when set, is told each phase's result as it ends.
	Progress io.Writer
}

// DefaultOptions returns the options `storybus bench` runs with by default.
func DefaultOptions() Options {
	return Options{
		Sync:       SyncAlways,
		Producers:  []int{16},
		Stories:    2000,
		Duration:   10 * time.Second,
		Warmup:     2 * time.Second,
		Rounds:     1,
		Workspaces: 1,
		NATSServer: "nats-server",
	}
}

// cluster reports whether the run writes to a NATS cluster rather than
// the embedded store.
func (o Options) cluster() bool { return o.NATSURL != "" || o.Cluster > 0 }

// replicas is how many replicas every stream and bucket has.
func (o Options) replicas() int {
	switch {
	case o.Replicas > 0:
		return o.Replicas
	case o.Cluster > 0:
		return min(o.Cluster, 3)
	case o.NATSURL != "":
		return 3
	}
	return 1
}

// Validate reports every problem with the options at once.
func (o Options) Validate() error {
	var errs []error
	if o.Remote == nil && o.Sync != SyncAlways && o.Sync != SyncInterval {
		errs = append(errs, fmt.Errorf("sync must be %s or %s, not %q", SyncAlways, SyncInterval, o.Sync))
	}
	if o.SyncInterval < 0 {
		errs = append(errs, errors.New("sync interval must not be negative"))
	}
	if len(o.Producers) == 0 {
		errs = append(errs, errors.New("producers must list at least one level"))
	}
	for _, n := range o.Producers {
		if n < 1 {
			errs = append(errs, fmt.Errorf("producers must be at least 1, not %d", n))
		}
	}
	if o.NATSURL != "" && o.Cluster > 0 {
		errs = append(errs, errors.New("an external cluster (NATS URL) or a local one (cluster), not both"))
	}
	if o.Cluster < 0 {
		errs = append(errs, errors.New("cluster must not be negative"))
	}
	if o.Cluster > 0 && o.NATSServer == "" {
		errs = append(errs, errors.New("a local cluster needs the nats-server binary"))
	}
	if o.Replicas < 0 || o.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas must be 1 to 5, not %d", o.Replicas))
	}
	if o.Replicas > 0 && !o.cluster() {
		errs = append(errs, errors.New("replicas apply to a cluster (NATS URL or a local cluster); the embedded store has one"))
	}
	if o.Cluster > 0 && o.Replicas > o.Cluster {
		errs = append(errs, fmt.Errorf("%d replicas need at least as many nodes, not a cluster of %d", o.Replicas, o.Cluster))
	}
	if o.Workspaces < 1 {
		errs = append(errs, errors.New("workspaces must be at least 1"))
	}
	if o.BusReplicas < 0 || o.BusReplicas > 16 {
		errs = append(errs, fmt.Errorf("bus replicas must be 1 to 16, not %d", o.BusReplicas))
	}
	if o.BusReplicas > 1 && !o.cluster() {
		// The embedded store's bus is its topics' sole writer.
		errs = append(errs, errors.New("several bus replicas need a cluster (NATS URL or a local cluster): the embedded store serves one bus"))
	}
	if o.Remote != nil {
		errs = append(errs, o.Remote.validate())
		if o.cluster() {
			errs = append(errs, errors.New("a running bus has its own store: no NATS URL or cluster"))
		}
		if o.Workspaces > 1 {
			errs = append(errs, errors.New("a running bus is driven on its one workspace"))
		}
		if len(o.Phases) > 0 && !slices.Equal(o.Phases, []PhaseName{PhaseBus}) {
			errs = append(errs, errors.New("a running bus is measured alone: no baseline phases"))
		}
	}
	if o.Stories < 1 {
		errs = append(errs, errors.New("stories must be at least 1"))
	}
	if o.Messages < 0 {
		errs = append(errs, errors.New("messages must not be negative"))
	}
	if o.Messages == 0 && o.Duration <= 0 {
		errs = append(errs, errors.New("duration must be positive when messages is not set"))
	}
	if o.Warmup < 0 {
		errs = append(errs, errors.New("warm-up must not be negative"))
	}
	if o.Rounds < 1 {
		errs = append(errs, errors.New("rounds must be at least 1"))
	}
	for _, p := range o.Phases {
		if !slices.Contains(Phases, p) {
			errs = append(errs, fmt.Errorf("unknown phase %q (the phases: %s)", p, phaseList()))
		}
	}
	return errors.Join(errs...)
}

// site is where a run's phases run: the embedded store, or a running bus.
type site interface {
	// runPhase runs one phase with the given number of producers.
	runPhase(ctx context.Context, name PhaseName, producers, round int) (Phase, error)
	close()
}

// Run runs the benchmark. The report is returned whenever the phases ran,
// together with an error if any message was refused or failed, or a
// stream holds other than the messages its phase had acknowledged.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	rep := &Report{Machine: currentMachine(), Settings: settingsOf(o)}
	var s site
	var err error
	if o.Remote != nil {
		s, err = newRemote(ctx, o)
	} else {
		s, err = newEnv(ctx, o)
	}
	if err != nil {
		return nil, err
	}
	defer s.close()
	var problems []error
	profiled := false
	for _, producers := range o.Producers {
		level := Level{Producers: producers}
		for r := 1; r <= o.Rounds; r++ {
			round := Round{Round: r}
			for _, name := range o.roundPhases(r) {
				profiling := false
				if name == PhaseBus && o.CPUProfile != nil && !profiled {
					if err := pprof.StartCPUProfile(o.CPUProfile); err != nil {
						return nil, fmt.Errorf("CPU profile: %w", err)
					}
					profiled, profiling = true, true
				}
				ph, err := s.runPhase(ctx, name, producers, r)
				if profiling {
					pprof.StopCPUProfile()
				}
				if err != nil {
					return nil, fmt.Errorf("%d producers, round %d, %s: %w", producers, r, name, err)
				}
				if o.Progress != nil {
					fmt.Fprintf(o.Progress, "producers %3d  round %d/%d  %-15s %8.0f msgs/s  p50 %6.2f ms  p99 %6.2f ms  errors %d\n",
						producers, r, o.Rounds, name, ph.PerSecond, ph.P50Ms, ph.P99Ms, ph.Errors)
				}
				problems = append(problems, ph.problems(producers, r)...)
				round.set(ph)
			}
			round.ratios()
			level.Rounds = append(level.Rounds, round)
		}
		level.summarise()
		rep.Levels = append(rep.Levels, level)
	}
	rep.Machine.LoadEnd = loadAverage()
	return rep, errors.Join(problems...)
}

// phases returns the phases a round runs, in Phases' order.
func (o Options) phases() []PhaseName {
	if o.Remote != nil {
		return []PhaseName{PhaseBus}
	}
	if len(o.Phases) == 0 {
		return Phases
	}
	var out []PhaseName
	for _, p := range Phases {
		if slices.Contains(o.Phases, p) {
			out = append(out, p)
		}
	}
	return out
}

// roundPhases returns the phases of round r in the order it runs them:
// Phases' order in odd rounds, the reverse in even ones, so that a machine
// growing busier or quieter during a run favours no phase in the median.
func (o Options) roundPhases(r int) []PhaseName {
	phases := o.phases()
	if r%2 == 0 {
		phases = slices.Clone(phases)
		slices.Reverse(phases)
	}
	return phases
}

// phaseList returns the phases' names separated by commas.
func phaseList() string {
	names := make([]string, len(Phases))
	for i, p := range Phases {
		names[i] = string(p)
	}
	return strings.Join(names, ",")
}

// runPhase runs one phase on fresh streams in each of its workspaces,
// checks what their streams hold and removes the streams again, so every
// phase starts on an equal store.
func (e *env) runPhase(ctx context.Context, name PhaseName, producers, round int) (Phase, error) {
	var targets []target
	defer func() {
		for _, t := range targets {
			_ = t.remove(context.WithoutCancel(ctx))
		}
	}()
	pubs := make([]publisher, e.o.Workspaces)
	for i := range e.o.Workspaces {
		ws := fmt.Sprintf("bench-%s-p%d-r%d", name, producers, round)
		if e.o.Workspaces > 1 {
			ws += fmt.Sprintf("-w%d", i)
		}
		var t target
		err := e.patiently(ctx, func() (err error) {
			t, err = e.open(ctx, name, ws)
			return err
		})
		if err != nil {
			return Phase{}, err
		}
		targets = append(targets, t)
		pubs[i] = t
	}
	before := e.storeOutMsgs()
	ph := drive(ctx, pubs, e.o, producers, generator{systemID: SystemID, storyPrefix: "story-"})
	ph.Name = name
	ph.Writes = durableWrites[name]
	if e.o.cluster() {
		ph.Writes = clusterWrites[name]
	}
	for _, t := range targets {
		t.settle()
	}
	if ph.AcceptedTotal > 0 {
		ph.StoreRequests = float64(e.storeOutMsgs()-before) / float64(ph.AcceptedTotal)
	}
	if err := ctx.Err(); err != nil {
		return Phase{}, err
	}
	if name == PhaseBus {
		var err error
		if ph.BusInsideMs, err = e.inside(targets); err != nil {
			return Phase{}, fmt.Errorf("reading the bus's metrics: %w", err)
		}
	}
	for _, t := range targets {
		n, err := t.streamMessages(ctx)
		if err != nil {
			return Phase{}, fmt.Errorf("counting the stream: %w", err)
		}
		ph.StreamMessages += n
	}
	ph.streamCounted = true
	for len(targets) > 0 {
		if err := e.patiently(ctx, func() error { return targets[0].remove(ctx) }); err != nil {
			return Phase{}, fmt.Errorf("removing the streams: %w", err)
		}
		targets = targets[1:]
	}
	return ph, nil
}

// patiently runs f, and on a cluster runs it again after a failure, up to
// three times in all, a second apart: a busy cluster's JetStream API can
// time out, or not show a stream just created yet, and removing or opening
// the streams again is harmless.
func (e *env) patiently(ctx context.Context, f func() error) error {
	err := f()
	for try := 1; err != nil && e.o.cluster() && try < 3; try++ {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
		err = f()
	}
	return err
}

// durableWrites says what each phase writes per message.
var durableWrites = map[PhaseName]string{
	PhaseBus:           "1 + 1 unsynced",
	PhaseRelay:         "1",
	PhaseRelayTwoWrite: "2",
	PhaseRaw:           "1",
	PhaseThreeWrite:    "3",
}

// clusterWrites says what each phase writes per message on a cluster,
// where every write is replicated before it is acknowledged.
var clusterWrites = map[PhaseName]string{
	PhaseBus:           "2 replicated",
	PhaseRelay:         "1 replicated",
	PhaseRelayTwoWrite: "2 replicated",
	PhaseRaw:           "1 replicated",
	PhaseThreeWrite:    "3 replicated",
}

// workerStats is what one producer saw.
type workerStats struct {
	latencies     []time.Duration
	accepted      int64
	acceptedTotal int64
	errors        int64
	statuses      map[int]int64
	errSamples    []string
	bytes, sent   int64
	lastEnd       time.Time
}

// maxErrorSamples bounds the error messages kept per phase.
const maxErrorSamples = 5

// drive runs producers against pubs, producer i against pubs[i modulo
// their number], each making its messages with g: a
// warm-up, then the measured part, by time or by message count. A message
// is measured when it was sent after the warm-up; the measured time ends
// with the last measured answer.
func drive(ctx context.Context, pubs []publisher, o Options, producers int, g generator) Phase {
	from := time.Now().Add(o.Warmup)
	to := from.Add(o.Duration)
	var remaining atomic.Int64
	remaining.Store(int64(o.Messages))
	stats := make([]workerStats, producers)
	var wg sync.WaitGroup
	for w := range producers {
		wg.Go(func() {
			s := &stats[w]
			s.statuses = map[int]int64{}
			p := newProducer(w, producers, o.Stories, g)
			t := pubs[w%len(pubs)]
			for ctx.Err() == nil {
				m := p.message()
				t0 := time.Now()
				measured := !t0.Before(from)
				if measured {
					if o.Messages > 0 {
						if remaining.Add(-1) < 0 {
							return
						}
					} else if !t0.Before(to) {
						return
					}
				}
				status, err := t.publish(ctx, m)
				d := time.Since(t0)
				s.sent++
				s.bytes += int64(len(m.body))
				if status != 0 {
					s.statuses[status]++
				}
				if err != nil {
					s.errors++
					if len(s.errSamples) < maxErrorSamples {
						s.errSamples = append(s.errSamples, err.Error())
					}
					continue
				}
				s.acceptedTotal++
				if measured {
					s.accepted++
					s.latencies = append(s.latencies, d)
					s.lastEnd = t0.Add(d)
				}
			}
		})
	}
	wg.Wait()
	return merge(stats, from)
}

// merge merges the producers' results into one phase result.
func merge(stats []workerStats, from time.Time) Phase {
	var ph Phase
	var all []time.Duration
	var end time.Time
	var bytes, sent int64
	for _, s := range stats {
		ph.Accepted += s.accepted
		ph.AcceptedTotal += s.acceptedTotal
		ph.Errors += s.errors
		bytes += s.bytes
		sent += s.sent
		all = append(all, s.latencies...)
		if s.lastEnd.After(end) {
			end = s.lastEnd
		}
		for code, n := range s.statuses {
			if ph.Statuses == nil {
				ph.Statuses = map[int]int64{}
			}
			ph.Statuses[code] += n
		}
		for _, e := range s.errSamples {
			if len(ph.ErrorSamples) < maxErrorSamples && !slices.Contains(ph.ErrorSamples, e) {
				ph.ErrorSamples = append(ph.ErrorSamples, e)
			}
		}
	}
	if sent > 0 {
		ph.PayloadBytes = bytes / sent
	}
	if end.After(from) {
		ph.Seconds = end.Sub(from).Seconds()
		ph.PerSecond = float64(ph.Accepted) / ph.Seconds
	}
	slices.Sort(all)
	if len(all) > 0 {
		var sum time.Duration
		for _, d := range all {
			sum += d
		}
		ph.MeanMs = millis(sum / time.Duration(len(all)))
	}
	ph.P50Ms = millis(percentile(all, 0.50))
	ph.P99Ms = millis(percentile(all, 0.99))
	if len(all) > 0 {
		ph.MaxMs = millis(all[len(all)-1])
	}
	return ph
}

// percentile returns the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio is a/b, or 0 when b is 0, so that a report stays valid JSON.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
