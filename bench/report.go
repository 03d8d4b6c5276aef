package bench

import (
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Report is the result of a run: one Level per level of concurrency.
type Report struct {
	Machine  Machine  `json:"machine"`
	Settings Settings `json:"settings"`
	Levels   []Level  `json:"levels"`
}

// Level is every round at one level of concurrency. Its headline (the
// embedded Round) is the median round.
type Level struct {
	// Producers is how many producers wrote concurrently.
	Producers int `json:"producers"`
	// MedianRound is the round, from 1, whose bus ÷ relay two-write
	// throughput is the median (the lower one for an even number of
	// rounds); against a running bus, whose bus throughput is.
	MedianRound int `json:"median_round"`
	Round
	// Rounds holds every round.
	Rounds []Round `json:"rounds"`
}

// Round is one run of every phase, and the bus's ratios to each baseline.
type Round struct {
	Round int   `json:"round"`
	Bus   Phase `json:"bus,omitzero"`
	// The baselines; a phase that did not run is left out of the JSON.
	Relay         Phase `json:"relay,omitzero"`
	RelayTwoWrite Phase `json:"relay_two_write,omitzero"`
	Raw           Phase `json:"raw_single,omitzero"`
	ThreeWrite    Phase `json:"three_write,omitzero"`
	// BusOverRelay and the others compare the bus with each baseline.
	BusOverRelay         Ratio `json:"bus_over_relay,omitzero"`
	BusOverRelayTwoWrite Ratio `json:"bus_over_relay_two_write,omitzero"`
	BusOverRaw           Ratio `json:"bus_over_raw_single,omitzero"`
	BusOverThreeWrite    Ratio `json:"bus_over_three_write,omitzero"`
}

// Ratio compares the bus with a baseline: the bus's number divided by the
// baseline's, 0 where the baseline measured nothing.
type Ratio struct {
	// Throughput divides messages per second: above 1, the bus is faster.
	Throughput float64 `json:"messages_per_second"`
	// P50 and P99 divide the latency percentiles: above 1, the bus is
	// slower.
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// compare returns bus ÷ base.
func compare(bus, base Phase) Ratio {
	return Ratio{
		Throughput: ratio(bus.PerSecond, base.PerSecond),
		P50:        ratio(bus.P50Ms, base.P50Ms),
		P99:        ratio(bus.P99Ms, base.P99Ms),
	}
}

func (r *Round) set(ph Phase) {
	switch ph.Name {
	case PhaseBus:
		r.Bus = ph
	case PhaseRelay:
		r.Relay = ph
	case PhaseRelayTwoWrite:
		r.RelayTwoWrite = ph
	case PhaseRaw:
		r.Raw = ph
	case PhaseThreeWrite:
		r.ThreeWrite = ph
	}
}

// ratios computes the round's ratios from its phases.
func (r *Round) ratios() {
	r.BusOverRelay = compare(r.Bus, r.Relay)
	r.BusOverRelayTwoWrite = compare(r.Bus, r.RelayTwoWrite)
	r.BusOverRaw = compare(r.Bus, r.Raw)
	r.BusOverThreeWrite = compare(r.Bus, r.ThreeWrite)
}

// phases returns the phases the round ran, in the order it ran them.
func (r *Round) phases() []Phase {
	var out []Phase
	for _, ph := range []Phase{r.Bus, r.Relay, r.RelayTwoWrite, r.Raw, r.ThreeWrite} {
		if ph.Name != "" {
			out = append(out, ph)
		}
	}
	return out
}

// Phase is what one phase measured.
type Phase struct {
	Name PhaseName `json:"name"`
	// Writes says how many durable writes each message costs.
	Writes string `json:"durable_writes_per_message"`
	// Accepted counts the measured messages that were accepted (202 for
	// the bus), Seconds the measured time, PerSecond their quotient.
	Accepted  int64   `json:"accepted"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"messages_per_second"`
	// Latency percentiles of the measured accepted messages, per request.
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	// Errors counts every message of the phase, warm-up included, that was
	// not accepted; ErrorSamples holds a few of their errors.
	Errors       int64    `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	// Statuses counts the bus's answers by HTTP status, warm-up included.
	Statuses map[int]int64 `json:"http_statuses,omitempty"`
	// AcceptedTotal counts every accepted message, warm-up included;
	// StreamMessages is what the phase's stream held at its end. They are
	// equal unless a message was lost or published twice. A running bus's
	// stream is not counted.
	AcceptedTotal  int64  `json:"accepted_total"`
	StreamMessages uint64 `json:"stream_messages,omitempty"`
	// streamCounted is set when StreamMessages was counted.
	streamCounted bool
	// StoreRequests is how many messages the store connection sent per
	// accepted message, warm-up and background writes included: the
	// JetStream requests (writes and reads) each message cost. A running
	// bus's are not counted.
	StoreRequests float64 `json:"store_requests_per_message,omitempty"`
	// PayloadBytes is the mean size of a message body.
	PayloadBytes int64 `json:"payload_bytes"`
	// BusInsideMs is the bus's own view of the phase, warm-up included:
	// mean milliseconds of its handler for accepted messages ("handler")
	// and of each store operation (record_create, publish, record_mark).
	// Only the bus phase has it.
	BusInsideMs map[string]float64 `json:"bus_inside_mean_ms,omitempty"`
}

// problems lists what makes the phase a failed measurement.
func (ph Phase) problems(producers, round int) []error {
	var errs []error
	at := fmt.Sprintf("%d producers, round %d, %s", producers, round, ph.Name)
	if ph.Errors > 0 {
		errs = append(errs, fmt.Errorf("%s: %d messages not accepted, e.g. %s", at, ph.Errors, strings.Join(ph.ErrorSamples, "; ")))
	}
	if ph.AcceptedTotal == 0 {
		errs = append(errs, fmt.Errorf("%s: no message was accepted", at))
	}
	if ph.streamCounted && uint64(ph.AcceptedTotal) != ph.StreamMessages {
		errs = append(errs, fmt.Errorf("%s: %d messages accepted but the stream holds %d", at, ph.AcceptedTotal, ph.StreamMessages))
	}
	return errs
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	OS         string `json:"goos"`
	Arch       string `json:"goarch"`
	GoVersion  string `json:"go_version"`
	// LoadStart and LoadEnd are the 1, 5 and 15 minute load averages at
	// the start and end of the run, where the system tells them.
	LoadStart string `json:"load_average_start,omitempty"`
	LoadEnd   string `json:"load_average_end,omitempty"`
}

func currentMachine() Machine {
	return Machine{
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		GoVersion:  runtime.Version(),
		LoadStart:  loadAverage(),
	}
}

// loadAverage returns the system's load averages, or "" where unknown.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Settings are the options a run used, as the command line spells them.
type Settings struct {
	// URL is the running bus's workspace URL; empty for the embedded one.
	URL string `json:"url,omitempty"`
	// NATSURL is the external NATS cluster written to; Cluster the size
	// of the local one the run started; Replicas their streams' and
	// buckets' replicas.
	NATSURL    string `json:"nats_url,omitempty"`
	Cluster    int    `json:"cluster,omitempty"`
	Replicas   int    `json:"replicas,omitempty"`
	Workspaces int    `json:"workspaces,omitempty"`
	// BusReplicas is how many buses the bus phase ran behind a
	// per-request round-robin front, when more than one.
	BusReplicas  int    `json:"bus_replicas,omitempty"`
	Sync         string `json:"sync,omitempty"`
	SyncInterval string `json:"sync_interval,omitempty"`
	Producers    []int  `json:"producers"`
	Stories      int    `json:"stories"`
	Duration     string `json:"duration,omitempty"`
	Warmup       string `json:"warmup"`
	Messages     int    `json:"messages,omitempty"`
	Rounds       int    `json:"rounds"`
	// Phases lists the phases run, when not all of them.
	Phases []PhaseName `json:"phases,omitempty"`
}

func settingsOf(o Options) Settings {
	s := Settings{
		Sync:      o.Sync,
		Producers: slices.Clone(o.Producers),
		Stories:   o.Stories,
		Warmup:    o.Warmup.String(),
		Messages:  o.Messages,
		Rounds:    o.Rounds,
		NATSURL:   o.NATSURL,
		Cluster:   o.Cluster,
	}
	if o.cluster() {
		s.Replicas = o.replicas()
	}
	if o.Workspaces > 1 {
		s.Workspaces = o.Workspaces
	}
	if o.BusReplicas > 1 {
		s.BusReplicas = o.BusReplicas
	}
	if o.NATSURL != "" {
		// The cluster's own configuration decides its fsyncs.
		s.Sync = ""
	}
	if len(o.Phases) > 0 {
		s.Phases = o.phases()
	}
	if o.SyncInterval > 0 {
		s.SyncInterval = o.SyncInterval.String()
	}
	if o.Remote != nil {
		s.URL, s.Sync, s.SyncInterval, s.Phases = o.Remote.URL, "", "", nil
	}
	if o.Messages == 0 {
		s.Duration = o.Duration.String()
	}
	return s
}

// Flags returns the settings as `storybus bench` flags.
func (s Settings) Flags() string {
	var f []string
	switch {
	case s.URL != "":
		f = append(f, "--url "+s.URL)
	case s.NATSURL != "":
		f = append(f, "--nats-url "+s.NATSURL)
	case s.Cluster > 0:
		f = append(f, "--cluster "+strconv.Itoa(s.Cluster))
	}
	if s.Sync != "" {
		f = append(f, "--sync "+s.Sync)
	}
	if s.Replicas > 0 {
		f = append(f, "--replicas "+strconv.Itoa(s.Replicas))
	}
	if s.SyncInterval != "" {
		f = append(f, "--sync-interval "+s.SyncInterval)
	}
	levels := make([]string, len(s.Producers))
	for i, n := range s.Producers {
		levels[i] = strconv.Itoa(n)
	}
	f = append(f, "--producers "+strings.Join(levels, ","), "--stories "+strconv.Itoa(s.Stories))
	if s.Workspaces > 1 {
		f = append(f, "--workspaces "+strconv.Itoa(s.Workspaces))
	}
	if s.BusReplicas > 1 {
		f = append(f, "--bus-replicas "+strconv.Itoa(s.BusReplicas))
	}
	if s.Messages > 0 {
		f = append(f, "--messages "+strconv.Itoa(s.Messages))
	} else {
		f = append(f, "--duration "+s.Duration)
	}
	f = append(f, "--warmup "+s.Warmup, "--rounds "+strconv.Itoa(s.Rounds))
	if len(s.Phases) > 0 {
		names := make([]string, len(s.Phases))
		for i, p := range s.Phases {
			names[i] = string(p)
		}
		f = append(f, "--phases "+strings.Join(names, ","))
	}
	return strings.Join(f, " ")
}

// summarise makes the median round the level's headline.
func (r *Level) summarise() {
	if len(r.Rounds) == 0 {
		return
	}
	order := make([]int, len(r.Rounds))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := r.Rounds[a].medianKey(), r.Rounds[b].medianKey()
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	r.Round = r.Rounds[order[(len(order)-1)/2]]
	r.MedianRound = r.Round.Round
}

// medianKey is what the median round is chosen by: bus ÷ relay two-write
// throughput, or the bus's throughput where there is no relay.
func (r *Round) medianKey() float64 {
	if r.RelayTwoWrite.Name == "" {
		return r.Bus.PerSecond
	}
	return r.BusOverRelayTwoWrite.Throughput
}

// phaseLabels are the table's names of the phases.
var phaseLabels = map[PhaseName]string{
	PhaseBus:           "bus (HTTP API)",
	PhaseRelay:         "relay (HTTP, 1 write)",
	PhaseRelayTwoWrite: "relay two-write (HTTP)",
	PhaseRaw:           "raw single publish",
	PhaseThreeWrite:    "three-write",
}

// WriteTable writes the report as a table for people: each level's
// phases, ratios and rounds, then a line per level when there are several.
func (r *Report) WriteTable(w io.Writer) error {
	m := r.Machine
	var b strings.Builder
	fmt.Fprintf(&b, "storybus publish benchmark\n")
	fmt.Fprintf(&b, "machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s", m.CPUs, m.GOMAXPROCS, m.OS, m.Arch, m.GoVersion)
	if m.LoadStart != "" {
		fmt.Fprintf(&b, ", load average %s at start, %s at end", m.LoadStart, m.LoadEnd)
	}
	fmt.Fprintf(&b, "\nflags:   %s\n", r.Settings.Flags())
	var payload int64
	if len(r.Levels) > 0 {
		payload = r.Levels[0].Bus.PayloadBytes
	}
	if r.Settings.URL != "" {
		fmt.Fprintf(&b, "target:  the running bus at %s, the bus phase alone; one message in %d a story.event, the others story.context snapshots (mean %d bytes)\n",
			r.Settings.URL, eventEvery, payload)
	} else if st := r.Settings; st.NATSURL != "" || st.Cluster > 0 {
		where := "the NATS cluster at " + st.NATSURL
		if st.Cluster > 0 {
			where = fmt.Sprintf("%d local nats-server processes clustered on loopback (fsync %s)", st.Cluster, st.Sync)
		}
		fmt.Fprintf(&b, "store:   %s, file storage, %d replicas, one connection, every snapshot a compare-and-swap; %d workspace(s) per phase; messages of %d bytes\n",
			where, st.Replicas, max(st.Workspaces, 1), payload)
		if st.BusReplicas > 1 {
			fmt.Fprintf(&b, "buses:   %d bus replicas, each its own connection, behind a front sending each request to the next in turn: a story's snapshots go through every replica\n", st.BusReplicas)
		}
	} else {
		fmt.Fprintf(&b, "store:   embedded JetStream, file storage, one in-process connection; %d workspace(s) per phase; messages of %d bytes\n", max(st.Workspaces, 1), payload)
	}
	for _, l := range r.Levels {
		if len(r.Levels) > 1 {
			fmt.Fprintf(&b, "\n== %d producers ==\n", l.Producers)
		}
		l.write(&b)
	}
	if len(r.Levels) > 1 {
		r.writeScaling(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// write writes one level's tables.
func (l *Level) write(b *strings.Builder) {
	if len(l.Rounds) > 1 {
		by := "median bus ÷ relay two-write"
		if l.RelayTwoWrite.Name == "" {
			by = "median bus msgs/s"
		}
		fmt.Fprintf(b, "rounds:  %d, the table shows round %d (%s)\n", len(l.Rounds), l.MedianRound, by)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tdurable writes/msg\tmsgs/s\tp50 ms\tp99 ms\taccepted\terrors")
	for _, ph := range l.phases() {
		writes := ph.Writes
		if writes == "" { // a running bus: its store is not known here
			writes = "n/a"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.2f\t%.2f\t%d\t%d\n",
			phaseLabels[ph.Name], writes, ph.PerSecond, ph.P50Ms, ph.P99Ms, ph.Accepted, ph.Errors)
	}
	_ = tw.Flush()
	var requests []string
	for _, ph := range l.phases() {
		if ph.StoreRequests > 0 {
			requests = append(requests, fmt.Sprintf("%s %.2f", ph.Name, ph.StoreRequests))
		}
	}
	if len(requests) > 0 {
		fmt.Fprintf(b, "\nstore requests per accepted message (warm-up included): %s\n", strings.Join(requests, ", "))
	}
	if len(l.Bus.Statuses) > 0 {
		codes := slices.Sorted(maps.Keys(l.Bus.Statuses))
		answers := make([]string, len(codes))
		for i, c := range codes {
			answers[i] = fmt.Sprintf("%d ×%d", c, l.Bus.Statuses[c])
		}
		fmt.Fprintf(b, "\nbus answers (warm-up included): %s\n", strings.Join(answers, ", "))
	}
	if l.Bus.Name != "" && len(l.phases()) > 1 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "bus ÷\tmsgs/s\tp50\tp99")
		for _, c := range []struct {
			name string
			r    Ratio
		}{{"relay", l.BusOverRelay}, {"relay two-write", l.BusOverRelayTwoWrite}, {"raw single", l.BusOverRaw}, {"three-write", l.BusOverThreeWrite}} {
			if c.r.Throughput != 0 {
				fmt.Fprintf(tw, "%s\t%.2f×\t%.2f×\t%.2f×\n", c.name, c.r.Throughput, c.r.P50, c.r.P99)
			}
		}
		_ = tw.Flush()
	}
	if in := l.Bus.BusInsideMs; len(in) > 0 {
		fmt.Fprintf(b, "\ninside the bus (its metrics, mean ms, warm-up included): handler %.2f; record_create %.2f, publish %.2f, record_mark %.2f (after the answer)\n",
			in["handler"], in["record_create"], in["publish"], in["record_mark"])
	}
	if len(l.Rounds) > 1 {
		b.WriteString("\n")
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "round\tbus msgs/s\trelay\trelay two-write\traw\tthree-write\tbus ÷ relay\tbus ÷ relay two-write\tbus ÷ raw\tbus ÷ three-write")
		for _, rd := range l.Rounds {
			// A phase that did not run shows a dash, not a measured zero.
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", rd.Round, orDash("%.0f", rd.Bus.PerSecond),
				orDash("%.0f", rd.Relay.PerSecond), orDash("%.0f", rd.RelayTwoWrite.PerSecond), orDash("%.0f", rd.Raw.PerSecond),
				orDash("%.0f", rd.ThreeWrite.PerSecond), orDash("%.2f", rd.BusOverRelay.Throughput),
				orDash("%.2f", rd.BusOverRelayTwoWrite.Throughput), orDash("%.2f", rd.BusOverRaw.Throughput),
				orDash("%.2f", rd.BusOverThreeWrite.Throughput))
		}
		_ = tw.Flush()
	}
	for _, ph := range l.phases() {
		for _, e := range ph.ErrorSamples {
			fmt.Fprintf(b, "error (%s): %s\n", ph.Name, e)
		}
	}
}

// writeScaling writes a line per level: the scaling curve, with the
// relays' where they ran.
func (r *Report) writeScaling(b *strings.Builder) {
	relays := slices.ContainsFunc(r.Levels, func(l Level) bool { return l.Relay.Name != "" || l.RelayTwoWrite.Name != "" })
	b.WriteString("\nscaling (the median round of each level)\n\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	head := "producers\tbus msgs/s\tp50 ms\tp99 ms\terrors"
	if relays {
		head += "\trelay msgs/s\trelay two-write msgs/s\tbus ÷ relay\tbus ÷ relay two-write"
	}
	fmt.Fprintln(tw, head)
	for _, l := range r.Levels {
		fmt.Fprintf(tw, "%d\t%.0f\t%.2f\t%.2f\t%d", l.Producers, l.Bus.PerSecond, l.Bus.P50Ms, l.Bus.P99Ms, l.Bus.Errors)
		if relays {
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s", orDash("%.0f", l.Relay.PerSecond), orDash("%.0f", l.RelayTwoWrite.PerSecond),
				orDash("%.2f", l.BusOverRelay.Throughput), orDash("%.2f", l.BusOverRelayTwoWrite.Throughput))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// orDash formats v, or "-" for a phase that did not run.
func orDash(format string, v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}
