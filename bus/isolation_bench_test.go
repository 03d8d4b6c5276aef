package bus_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
)

// BenchmarkNeighbourUnderFlood measures what a flood against one workspace
// costs another served by the same bus: workspace other's p99 publish
// latency alone, and while 16 producers flood workspace newsroom, once with
// a module that runs to its policy deadline on every message, once far past
// newsroom's rate limit. It reports each p99 and their ratio (the target is
// at most 1.25); run it with make bench-isolation.
func BenchmarkNeighbourUnderFlood(b *testing.B) {
	type attack struct {
		name  string
		setup func(*config.Workspace)
		hold  time.Duration
	}
	var attacks []attack
	for _, hold := range []struct {
		name string
		d    time.Duration
	}{{"", bus.DefaultRefusalHold}, {", refusals answered at once", 0}} {
		attacks = append(attacks,
			attack{"deadline-tripping module" + hold.name, func(w *config.Workspace) { w.Policies = []config.PolicyModule{holdingPolicy} }, hold.d},
			attack{"10x the rate limit" + hold.name, func(w *config.Workspace) { w.Limits = config.Limits{RatePerSecond: 50, Burst: 50} }, hold.d})
	}
	for _, attack := range attacks {
		b.Run(attack.name, func(b *testing.B) {
			// The bus as serve runs it: over-share refusals held
			// (--refusal-hold), or, to compare, answered at once.
			h := newHarness(b, func(o *bus.Options) { o.RefusalHold = attack.hold })
			target := workspaceConfig("newsroom")
			attack.setup(target)
			if err := h.srv.Apply(context.Background(), target); err != nil {
				b.Fatal(err)
			}
			victim := h.token(b, "other", "cms", cmsSecret)
			attacker := h.token(b, "newsroom", "cms", cmsSecret)
			// The bus's own handler, as serve runs it: not through the
			// harness's OpenAPI checker, whose validation of every answer
			// is the test's cost, not the bus's.
			plain := httptest.NewServer(h.srv.Handler())
			b.Cleanup(plain.Close)
			victimClient, floodClient := keepAliveClient(1), keepAliveClient(16)
			const samples = 400
			for b.Loop() {
				alone := victimLatencies(b, victimClient, plain.URL, victim, samples)

				ctx, stop := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() { flood(ctx, floodClient, plain.URL, attacker) })
				}
				time.Sleep(500 * time.Millisecond) // the flood under way
				attacked := victimLatencies(b, victimClient, plain.URL, victim, samples)
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

// keepAliveClient keeps up to conns connections open to the bus, one per
// producer, as a producer's HTTP client does (http.DefaultClient keeps two,
// so 16 producers would open a connection for most requests).
func keepAliveClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}}
}

// victimLatencies publishes n snapshots to workspace other, one at a time,
// and returns how long each took; each must be accepted.
func victimLatencies(b *testing.B, c *http.Client, url, token string, n int) []time.Duration {
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		status, body := publishOnce(context.Background(), c, url, "other", token, snapshot("", fmt.Sprintf("story-%d", time.Now().UnixNano()), 1, "cms"))
		out = append(out, time.Since(start))
		if status != http.StatusAccepted {
			b.Fatalf("the victim's publish: %d %s", status, body)
		}
	}
	return out
}

// flood publishes to workspace newsroom as fast as it answers until ctx
// ends, whatever the answers.
func flood(ctx context.Context, c *http.Client, url, token string) {
	for ctx.Err() == nil {
		publishOnce(ctx, c, url, "newsroom", token, snapshot("", fmt.Sprintf("flood-%d", time.Now().UnixNano()), 1, "cms"))
	}
}

// publishOnce posts body to workspace ws and returns the answer's status
// and body (0 when there was none).
func publishOnce(ctx context.Context, c *http.Client, url, ws, token string, body []byte) (int, []byte) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/tenants/"+ws+"/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*99/100]
}
