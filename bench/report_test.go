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

// TestMedianRoundIsByRelayTwoWrite: the headline is the round whose bus ÷
// relay two-write throughput is the median, the lower one of an even
// number.
func TestMedianRoundIsByRelayTwoWrite(t *testing.T) {
	for _, c := range []struct {
		name  string
		bus   []float64
		round int
	}{
		{"one", []float64{700}, 1},
		{"odd", []float64{1100, 700, 900}, 3},
		{"even", []float64{1100, 700, 900, 1000}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := &Report{}
			for i, b := range c.bus {
				rep.Rounds = append(rep.Rounds, round(i+1, b))
			}
			rep.summarise()
			if rep.MedianRound != c.round || rep.Round.Round != c.round || rep.Bus.PerSecond != c.bus[c.round-1] {
				t.Errorf("median round %d (bus %.0f msgs/s); want round %d", rep.MedianRound, rep.Bus.PerSecond, c.round)
			}
		})
	}
}

// TestTableAndJSONShowEveryRatio checks what a person and a script read.
func TestTableAndJSONShowEveryRatio(t *testing.T) {
	rep := &Report{Settings: settingsOf(DefaultOptions())}
	rep.Rounds = []Round{round(1, 900), round(2, 1200)}
	rep.summarise()
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "rounds:  2, the table shows round 1 (median bus ÷ relay two-write)") {
		t.Errorf("table does not name the median round:\n%s", table.String())
	}
	for _, c := range []struct{ prefix, want string }{
		{"relay (HTTP, 1 write)", "1 2000 3.00 8.00 100 0"},
		{"relay two-write (HTTP)", "2 1000 5.00 10.00 100 0"},
		{"relay  ", "0.45× 2.00× 1.50×"},
		{"relay two-write  ", "0.90× 1.20× 1.20×"},
		{"2 ", "1200 2000 1000 4000 800 0.60 1.20 0.30 1.50"},
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
		MedianRound          int   `json:"median_round"`
		Relay                Phase `json:"relay"`
		BusOverRelay         Ratio `json:"bus_over_relay"`
		BusOverRelayTwoWrite Ratio `json:"bus_over_relay_two_write"`
		Rounds               []struct {
			BusOverRelayTwoWrite Ratio `json:"bus_over_relay_two_write"`
		} `json:"rounds"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.MedianRound != 1 || got.Relay.PerSecond != 2000 || !near(got.BusOverRelay.Throughput, 0.45) ||
		!near(got.BusOverRelayTwoWrite.P99, 1.2) || len(got.Rounds) != 2 || !near(got.Rounds[1].BusOverRelayTwoWrite.Throughput, 1.2) {
		t.Errorf("JSON: %s", b)
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
