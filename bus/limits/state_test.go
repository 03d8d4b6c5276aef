package limits

import (
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
)

var noon = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestRateIsGCRA(t *testing.T) {
	type step struct {
		at   time.Duration // after noon
		ok   bool
		wait time.Duration
	}
	for _, tc := range []struct {
		name  string
		rate  float64
		burst int
		steps []step
	}{
		{"burst then one per interval", 0.5, 3, []step{
			{0, true, 0}, {0, true, 0}, {0, true, 0}, {0, false, 2 * time.Second},
			{time.Second, false, time.Second}, {2 * time.Second, true, 0}, {2 * time.Second, false, 2 * time.Second},
		}},
		{"no burst is a burst of one", 10, 0, []step{
			{0, true, 0}, {0, false, 100 * time.Millisecond}, {100 * time.Millisecond, true, 0},
		}},
		{"idle time refills up to the burst, not beyond", 1, 2, []step{
			{0, true, 0}, {0, true, 0}, {0, false, time.Second},
			{time.Hour, true, 0}, {time.Hour, true, 0}, {time.Hour, false, time.Second},
		}},
		{"refusals use no token", 1, 1, []step{
			{0, true, 0}, {500 * time.Millisecond, false, 500 * time.Millisecond},
			{999 * time.Millisecond, false, time.Millisecond}, {time.Second, true, 0},
		}},
		{"a slow rate does not overflow", 1e-12, 1 << 40, []step{{0, true, 0}, {0, true, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s state
			for i, st := range tc.steps {
				ok, wait := s.admitRate(noon.Add(st.at), tc.rate, tc.burst)
				if ok != st.ok || wait != st.wait {
					t.Fatalf("step %d at +%s: got %v %s, want %v %s", i, st.at, ok, wait, st.ok, st.wait)
				}
			}
		})
	}
}

func TestRaisedRateTakesEffectWithinOneInterval(t *testing.T) {
	var s state
	for range 3 { // one every 100 s: the third is 200 s out
		s.admitRate(noon, 0.01, 3)
	}
	if ok, _ := s.admitRate(noon, 0.01, 3); ok {
		t.Fatal("admitted past the burst")
	}
	if ok, wait := s.admitRate(noon, 10, 1); ok || wait != 100*time.Millisecond {
		t.Fatalf("raised limit: %v %s", ok, wait)
	}
	if ok, _ := s.admitRate(noon.Add(100*time.Millisecond), 10, 1); !ok {
		t.Fatal("raised limit not in effect after one interval")
	}
}

func TestQuotaCountsPerUTCDay(t *testing.T) {
	var s state
	lease := time.Minute
	s.roll(noon)
	var holds []int64
	for range 3 {
		until, _, _ := s.reserve(noon, 3, lease)
		if until == 0 {
			t.Fatal("refused within the quota")
		}
		holds = append(holds, until)
	}
	if until, wait, held := s.reserve(noon, 3, lease); until != 0 || wait != time.Second || !held {
		t.Fatalf("all slots held: %d %s %v", until, wait, held)
	}
	s.settle(holds[0], true, utcDay(noon))
	s.settle(holds[1], false, utcDay(noon)) // refused: frees its slot
	if s.Accepted != 1 || s.inFlight() != 1 {
		t.Fatalf("accepted %d in flight %d", s.Accepted, s.inFlight())
	}
	until, _, _ := s.reserve(noon, 3, lease)
	s.settle(holds[2], true, utcDay(noon))
	s.settle(until, true, utcDay(noon))
	if got, wait, held := s.reserve(noon, 3, lease); got != 0 || wait != 12*time.Hour || held {
		t.Fatalf("quota used up: %d %s %v", got, wait, held)
	}

	// The next UTC day starts afresh; a count of the previous day that
	// lands late does not count against it.
	tomorrow := noon.Add(12 * time.Hour)
	if !s.roll(tomorrow) || s.Accepted != 0 || s.Day != "2026-11-30" {
		t.Fatalf("rolled to %+v", s)
	}
	s.settle(0, true, "2026-11-29")
	if s.Accepted != 0 {
		t.Fatal("a count of yesterday counted today")
	}
	// A lagging clock never takes the state back to an earlier day.
	if s.roll(noon) || s.Day != "2026-11-30" {
		t.Fatalf("rolled back to %s", s.Day)
	}
}

func TestHoldsLapse(t *testing.T) {
	var s state
	s.roll(noon)
	until, _, _ := s.reserve(noon, 1, time.Minute)
	if until%holdGranularity != 0 || until < noon.Add(time.Minute).Unix() {
		t.Fatalf("hold until %d", until)
	}
	if got, _, held := s.reserve(noon, 1, time.Minute); got != 0 || !held {
		t.Fatal("the slot is not held")
	}
	s.roll(time.Unix(until, 0))
	if s.inFlight() != 0 {
		t.Fatal("a lapsed hold still holds")
	}
	// Settling a lapsed hold frees nothing else and still counts.
	other, _, _ := s.reserve(time.Unix(until, 0), 2, time.Minute)
	s.settle(until, true, s.Day)
	if s.inFlight() != 1 || s.Accepted != 1 || other == until {
		t.Fatalf("%+v", s)
	}
}

func TestDecideRateBeforeQuota(t *testing.T) {
	var s state
	s.roll(noon)
	lim := config.Limits{RatePerSecond: 1, Burst: 1, DailyQuota: 5}
	if d, until, used := decide(&s, noon, lim, time.Minute); d.Verdict != Admitted || until == 0 || !used {
		t.Fatalf("first: %+v %d %v", d, until, used)
	}
	if d, until, used := decide(&s, noon, lim, time.Minute); d.Verdict != RateLimited || until != 0 || used {
		t.Fatalf("second: %+v %d %v", d, until, used)
	}
	if s.inFlight() != 1 {
		t.Fatal("a rate-limited request reserved a slot")
	}
	// Without a rate limit, a refusal for the quota changes nothing.
	s.Accepted = 5
	if d, _, used := decide(&s, noon, config.Limits{DailyQuota: 5}, time.Minute); d.Verdict != QuotaExceeded || used {
		t.Fatalf("quota: %+v %v", d, used)
	}
}
