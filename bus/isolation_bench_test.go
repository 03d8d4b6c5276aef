package bus_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/config"
)

// BenchmarkNeighbourUnderFlood measures what a flood against one workspace
// costs another served by the same bus: workspace other's p99 publish
// latency alone, and while 16 producers flood workspace newsroom, once with
// a module that runs to its policy deadline on every message, once far past
// newsroom's rate limit. It reports each p99 and their ratio (the target is
// at most 1.25); run it with make bench-isolation.
func BenchmarkNeighbourUnderFlood(b *testing.B) {
	for _, attack := range []struct {
		name  string
		setup func(*config.Workspace)
	}{
		{"deadline-tripping module", func(w *config.Workspace) { w.Policies = []config.PolicyModule{holdingPolicy} }},
		{"10x the rate limit", func(w *config.Workspace) {
			w.Limits = config.Limits{RatePerSecond: 50, Burst: 50}
		}},
	} {
		b.Run(attack.name, func(b *testing.B) {
			h := newHarness(b)
			target := workspaceConfig("newsroom")
			attack.setup(target)
			if err := h.srv.Apply(context.Background(), target); err != nil {
				b.Fatal(err)
			}
			victim := h.token(b, "other", "cms", cmsSecret)
			attacker := h.token(b, "newsroom", "cms", cmsSecret)
			const samples = 400
			for b.Loop() {
				alone := victimLatencies(b, h, victim, samples)

				ctx, stop := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() { flood(ctx, h, attacker) })
				}
				time.Sleep(500 * time.Millisecond) // the flood under way
				attacked := victimLatencies(b, h, victim, samples)
				stop()
				wg.Wait()

				p99Alone, p99Attacked := p99(alone), p99(attacked)
				b.ReportMetric(float64(p99Alone.Microseconds())/1000, "p99-alone-ms")
				b.ReportMetric(float64(p99Attacked.Microseconds())/1000, "p99-attacked-ms")
				b.ReportMetric(float64(p99Attacked)/float64(p99Alone), "p99-ratio")
			}
		})
	}
}

// victimLatencies publishes n snapshots to workspace other, one at a time,
// and returns how long each took; each must be accepted.
func victimLatencies(b *testing.B, h *harness, token string, n int) []time.Duration {
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		a := h.post(b, "other", token, snapshot("", fmt.Sprintf("story-%d", time.Now().UnixNano()), 1, "cms"))
		out = append(out, time.Since(start))
		if a.Status != http.StatusAccepted {
			b.Fatalf("the victim's publish: %d %s", a.Status, a.Raw)
		}
	}
	return out
}

// flood publishes to workspace newsroom as fast as it answers until ctx
// ends, whatever the answers.
func flood(ctx context.Context, h *harness, token string) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages",
			bytes.NewReader(snapshot("", fmt.Sprintf("flood-%d", time.Now().UnixNano()), 1, "cms")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		if res, err := http.DefaultClient.Do(req); err == nil {
			_ = res.Body.Close()
		}
	}
}

func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*99/100]
}
