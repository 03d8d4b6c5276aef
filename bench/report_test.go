package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// phase returns a measured phase with the given throughput and latencies.
func phase(name PhaseName, perSecond, p50, p99 float64) Phase {
	return Phase{Name: name, Writes: durableWrites[name], PerSecond: perSecond, P50Ms: p50, P99Ms: p99, Accepted: 100, AcceptedTotal: 100, StreamMessages: 100}
}

// round returns a round whose bus runs at busPerSecond against fixed
// baselines, with its ratios computed.
func round(n int, busPerSecond float64) Round {
	r := Round{Round: n}
	for _, ph := range []Phase{
		phase(PhaseBus, busPerSecond, 6, 12),
		phase(PhaseRelay, 2000, 3, 8),
		phase(PhaseRelayTwoWrite, 1000, 5, 10),
		phase(PhaseRaw, 4000, 1, 2),
		phase(PhaseThreeWrite, 800, 8, 16),
	} {
		r.set(ph)
	}
	r.ratios()
	return r
}

// TestRatiosDivideTheBusByEachBaseline checks every ratio of a round.
func TestRatiosDivideTheBusByEachBaseline(t *testing.T) {
	r := round(1, 900)
	for _, c := range []struct {
		name string
		got  Ratio
		want Ratio
	}{
		{"relay", r.BusOverRelay, Ratio{Throughput: 0.45, P50: 2, P99: 1.5}},
		{"relay two-write", r.BusOverRelayTwoWrite, Ratio{Throughput: 0.9, P50: 1.2, P99: 1.2}},
		{"raw single", r.BusOverRaw, Ratio{Throughput: 0.225, P50: 6, P99: 6}},
		{"three-write", r.BusOverThreeWrite, Ratio{Throughput: 1.125, P50: 0.75, P99: 0.75}},
	} {
		if !near(c.got.Throughput, c.want.Throughput) || !near(c.got.P50, c.want.P50) || !near(c.got.P99, c.want.P99) {
			t.Errorf("bus ÷ %s = %+v; want %+v", c.name, c.got, c.want)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestRatioOverNothingIsZero: a baseline that did not run gives 0, never
// an infinity that JSON cannot hold.
func TestRatioOverNothingIsZero(t *testing.T) {
	r := Round{Round: 1}
	r.set(phase(PhaseBus, 900, 6, 12))
	r.ratios()
	if r.BusOverRelay != (Ratio{}) || r.BusOverRaw != (Ratio{}) {
		t.Errorf("ratios over phases that did not run: %+v, %+v; want zero", r.BusOverRelay, r.BusOverRaw)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Errorf("as JSON: %v", err)
	}
	if got := len(r.phases()); got != 1 {
		t.Errorf("the round lists %d phases; want only the bus", got)
	}
}

// TestMedianRoundIsByRelayTwoWrite: a level's headline is the round whose
// bus ÷ relay two-write throughput is the median, the lower one of an even
// number; without the relay, the round whose bus throughput is.
func TestMedianRoundIsByRelayTwoWrite(t *testing.T) {
	for _, c := range []struct {
		name  string
		bus   []float64
		alone bool
		round int
	}{
		{"one", []float64{700}, false, 1},
		{"odd", []float64{1100, 700, 900}, false, 3},
		{"even", []float64{1100, 700, 900, 1000}, false, 3},
		{"bus alone", []float64{1100, 700, 900}, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &Level{}
			for i, b := range c.bus {
				r := round(i+1, b)
				if c.alone {
					r = Round{Round: i + 1, Bus: r.Bus}
				}
				l.Rounds = append(l.Rounds, r)
			}
			l.summarise()
			if l.MedianRound != c.round || l.Round.Round != c.round || l.Bus.PerSecond != c.bus[c.round-1] {
				t.Errorf("median round %d (bus %.0f msgs/s); want round %d", l.MedianRound, l.Bus.PerSecond, c.round)
			}
		})
	}
}

// level returns a summarised level of two rounds, the bus's throughput
// scaled by k.
func level(producers int, k float64) Level {
	l := Level{Producers: producers, Rounds: []Round{round(1, 900*k), round(2, 1200*k)}}
	l.summarise()
	return l
}

// TestTableAndJSONShowEveryRatio checks what a person and a script read of
// a sweep of the embedded bus: every level's phases and ratios, and a line
// per level.
func TestTableAndJSONShowEveryRatio(t *testing.T) {
	o := DefaultOptions()
	o.Producers = []int{4, 16}
	rep := &Report{Settings: settingsOf(o), Levels: []Level{level(4, 1), level(16, 2)}}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--producers 4,16", "== 4 producers ==", "== 16 producers ==",
		"rounds:  2, the table shows round 1 (median bus ÷ relay two-write)", "scaling (the median round of each level)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	for _, c := range []struct{ prefix, want string }{
		{"relay (HTTP, 1 write)", "1 2000 3.00 8.00 100 0"},
		{"relay two-write (HTTP)", "2 1000 5.00 10.00 100 0"},
		{"relay  ", "0.45× 2.00× 1.50×"},
		{"relay two-write  ", "0.90× 1.20× 1.20×"},
		{"2 ", "1200 2000 1000 4000 800 0.60 1.20 0.30 1.50"},
		// The scaling lines: producers, bus msgs/s, p50, p99, errors, relay,
		// relay two-write, bus ÷ relay, bus ÷ relay two-write.
		{"4 ", "900 6.00 12.00 0 2000 1000 0.45 0.90"},
		{"16 ", "1800 6.00 12.00 0 2000 1000 0.90 1.80"},
	} {
		if got := row(table.String(), c.prefix); got != c.want {
			t.Errorf("table row %q = %q; want %q\n%s", c.prefix, got, c.want, table.String())
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Settings struct {
			Producers []int `json:"producers"`
		} `json:"settings"`
		Levels []struct {
			Producers            int   `json:"producers"`
			MedianRound          int   `json:"median_round"`
			Bus                  Phase `json:"bus"`
			Relay                Phase `json:"relay"`
			BusOverRelay         Ratio `json:"bus_over_relay"`
			BusOverRelayTwoWrite Ratio `json:"bus_over_relay_two_write"`
			Rounds               []struct {
				BusOverRelayTwoWrite Ratio `json:"bus_over_relay_two_write"`
			} `json:"rounds"`
		} `json:"levels"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Settings.Producers) != 2 || len(got.Levels) != 2 {
		t.Fatalf("JSON: %s", b)
	}
	l := got.Levels[1]
	if l.Producers != 16 || l.MedianRound != 1 || l.Bus.PerSecond != 1800 || l.Relay.PerSecond != 2000 || !near(l.BusOverRelay.Throughput, 0.9) ||
		!near(l.BusOverRelayTwoWrite.P99, 1.2) || len(l.Rounds) != 2 || !near(l.Rounds[1].BusOverRelayTwoWrite.Throughput, 2.4) {
		t.Errorf("JSON level 16: %+v\n%s", l, b)
	}
}

// TestTableOfARunningBus: against a running bus the table names it, shows
// the bus's answers by status and no baseline.
func TestTableOfARunningBus(t *testing.T) {
	o := DefaultOptions()
	o.Producers = []int{1, 4}
	o.Remote = &Remote{URL: "https://bus.example/v1/tenants/newsroom"}
	bus := phase(PhaseBus, 300, 3, 9)
	bus.Writes = ""
	bus.Statuses = map[int]int64{202: 95, 429: 5}
	bus.Errors = 5
	var levels []Level
	for _, n := range o.Producers {
		l := Level{Producers: n, Rounds: []Round{{Round: 1, Bus: bus}}}
		l.Rounds[0].ratios()
		l.summarise()
		levels = append(levels, l)
	}
	rep := &Report{Settings: settingsOf(o), Levels: levels}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	out := table.String()
	for _, want := range []string{"flags:   --url https://bus.example/v1/tenants/newsroom --producers 1,4 ",
		"target:  the running bus at https://bus.example/v1/tenants/newsroom", "bus answers (warm-up included): 202 ×95, 429 ×5"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"--sync", "relay", "raw single", "bus ÷", " - "} {
		if strings.Contains(out, unwanted) {
			t.Errorf("table of a running bus shows %q:\n%s", unwanted, out)
		}
	}
	if got := row(out, "4 "); got != "300 3.00 9.00 5" {
		t.Errorf("scaling line of 4 producers = %q\n%s", got, out)
	}
}

// row returns the fields after prefix of the table's first line that
// starts with it, joined by single spaces.
func row(table, prefix string) string {
	for line := range strings.Lines(table) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return strings.Join(strings.Fields(rest), " ")
		}
	}
	return ""
}
