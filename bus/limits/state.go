package limits

import (
	"math"
	"slices"
	"time"
)

// state is what the bucket holds for one connection: the rate limit's
// theoretical arrival time and the quota's count for one UTC day.
type state struct {
	// TAT is the GCRA theoretical arrival time, in Unix nanoseconds: the
	// moment the connection's bucket of tokens would be full again.
	TAT int64 `json:"tat,omitempty"`
	// Day is the UTC day (2006-01-02) that Accepted counts.
	Day string `json:"day,omitempty"`
	// Accepted counts the messages accepted on Day.
	Accepted int64 `json:"accepted,omitempty"`
	// Holds are the quota slots reserved by requests still in flight,
	// grouped by the Unix second at which they lapse.
	Holds []hold `json:"holds,omitempty"`
}

// hold is N reservations that lapse at Until (Unix seconds).
type hold struct {
	Until int64 `json:"until"`
	N     int64 `json:"n"`
}

// holdGranularity groups reservations lapsing within the same 10 s, so
// that a state holds at most lease/10s groups however busy the connection.
const holdGranularity = 10

// maxInterval caps GCRA's intervals so that their sums stay far from
// int64 overflow: about 31 years.
const maxInterval = int64(1e18)

func (s state) clone() state {
	s.Holds = slices.Clone(s.Holds)
	return s
}

func utcDay(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// NextMidnight returns the start of the UTC day after t's: when a daily
// quota used up at t is renewed.
func NextMidnight(t time.Time) time.Time {
	u := t.UTC()
	return time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC)
}

// roll starts a new day's count when now is on a later UTC day than the
// state, and drops lapsed holds. It never goes back to an earlier day, so
// a replica whose clock lags counts into the day another one started.
func (s *state) roll(now time.Time) bool {
	changed := false
	if d := utcDay(now); d > s.Day {
		s.Day, s.Accepted, changed = d, 0, true
	}
	sec := now.Unix()
	n := len(s.Holds)
	s.Holds = slices.DeleteFunc(s.Holds, func(h hold) bool { return h.Until <= sec })
	return changed || len(s.Holds) != n
}

func (s *state) inFlight() int64 {
	var n int64
	for _, h := range s.Holds {
		n += h.N
	}
	return n
}

// gcra returns the emission interval T and the burst tolerance τ, in
// nanoseconds, of a rate limit.
func gcra(rate float64, burst int) (t, tau int64) {
	t = int64(min(float64(time.Second)/rate, float64(maxInterval)))
	tau = int64(min(float64(max(burst, 1)-1)*float64(t), float64(maxInterval)))
	return t, tau
}

// admitRate is GCRA for one request at now: the request is admitted when
// the theoretical arrival time is at most τ ahead of now, and then moves
// it one interval on. A refused request uses nothing and learns how long
// until a token is available.
func (s *state) admitRate(now time.Time, rate float64, burst int) (bool, time.Duration) {
	t, tau := gcra(rate, burst)
	n := now.UnixNano()
	// Never later than the current limits allow: a raised limit takes
	// effect within one new interval. Clamping is a change to store.
	s.TAT = min(s.TAT, n+tau+t)
	tat := max(s.TAT, n)
	if wait := tat - n - tau; wait > 0 {
		return false, time.Duration(wait)
	}
	s.TAT = tat + t
	return true, 0
}

// reserve takes one slot of the day's quota for a request in flight, to
// be settled when the request ends and to lapse at the latest after
// lease. It refuses when the day's accepted messages, with the slots held
// by requests in flight, reach the quota; heldOnly reports a refusal that
// only the holds caused, which may end within moments.
func (s *state) reserve(now time.Time, quota int64, lease time.Duration) (until int64, wait time.Duration, heldOnly bool) {
	if s.Accepted >= quota {
		return 0, NextMidnight(now).Sub(now), false
	}
	if s.Accepted+s.inFlight() >= quota {
		return 0, time.Second, true
	}
	until = now.Add(lease).Unix()
	until = (until + holdGranularity - 1) / holdGranularity * holdGranularity
	if i := slices.IndexFunc(s.Holds, func(h hold) bool { return h.Until == until }); i >= 0 {
		s.Holds[i].N++
	} else {
		s.Holds = append(s.Holds, hold{Until: until, N: 1})
	}
	return until, 0, false
}

// settle ends a reservation: it frees the hold lapsing at until, if it has
// not lapsed (until 0: none), and counts a message accepted on day, if
// that is still the state's day.
func (s *state) settle(until int64, accepted bool, day string) {
	if i := slices.IndexFunc(s.Holds, func(h hold) bool { return h.Until == until }); until > 0 && i >= 0 {
		if s.Holds[i].N--; s.Holds[i].N <= 0 {
			s.Holds = slices.Delete(s.Holds, i, i+1)
		}
	}
	if accepted && day == s.Day && s.Accepted < math.MaxInt64 {
		s.Accepted++
	}
}
