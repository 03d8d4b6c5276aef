package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/internal/testutil"
	"github.com/storybus/storybus/rules"
)

// TestWorkspaceRequestsInFlightAreBounded holds a workspace's publishes in
// its store, as a slow or flooded store would: past its requestConcurrency
// its next publish is refused at once with 503 workspace.busy and
// Retry-After, nothing of it recorded; another workspace's publishes are
// still accepted; and once the held ones are answered, the workspace's
// slots are free again.
func TestWorkspaceRequestsInFlightAreBounded(t *testing.T) {
	h := newHarness(t)
	cfg := workspaceConfig("newsroom")
	cfg.RequestConcurrency = 2
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	other := h.token(t, "other", "cms", cmsSecret)

	held, release := make(chan string, 8), make(chan struct{})
	hold := publish.Faults(func(ctx context.Context, p publish.FaultPoint, id string) error {
		if p == publish.FaultBeforePublish {
			held <- id
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	h.faults.Store(&hold)

	var wg sync.WaitGroup
	answers := make(chan answer, 2)
	for story := range 2 {
		wg.Go(func() { answers <- h.post(t, "newsroom", tok, snapshot("", fmt.Sprintf("held-%d", story), 1, "cms")) })
	}
	for range 2 {
		select {
		case <-held:
		case <-time.After(30 * time.Second):
			t.Fatal("the two publishes did not reach the store")
		}
	}

	busy := snapshot("", "busy", 1, "cms")
	a := h.post(t, "newsroom", tok, busy)
	expect(t, a, http.StatusServiceUnavailable, rules.WorkspaceBusy)
	if ra := a.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	// Another workspace is not bound by this one's slots (its store
	// operations are held too, so it is answered only once released).
	otherAnswer := make(chan answer, 1)
	go func() { otherAnswer <- h.post(t, "other", other, snapshot("", "neighbour", 1, "cms")) }()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the other workspace's publish did not reach the store while this one was full")
	}

	close(release)
	wg.Wait()
	for range 2 {
		expect(t, <-answers, http.StatusAccepted, "")
	}
	expect(t, <-otherAnswer, http.StatusAccepted, "")
	h.faults.Store(nil)
	// The refused message was not recorded: sent again, it is accepted,
	// not answered as a duplicate; and the slots are free again.
	testutil.Eventually(t, "the held publishes' slots are given back", 30*time.Second, func() error {
		if a := h.post(t, "newsroom", tok, busy); a.Status != http.StatusAccepted {
			return fmt.Errorf("%d %s", a.Status, a.Raw)
		}
		return nil
	})
	if m := h.metrics(t); !strings.Contains(m, `storybus_publish_requests_total{rule="workspace.busy",status="503",workspace="newsroom"} 1`) {
		t.Errorf("the refusal is not counted:\n%s", m)
	}
}

// TestOverShareRefusalsAreHeld proves a refusal that says "faster than your
// share" is held before it is answered, so a producer that retries at once
// cannot spin: with a rate limit of one request a minute and a hold of a
// minute, the second request's 429 is not answered while it is held; a
// third, past the bound on held refusals (one), is answered at once; and a
// held request whose client gives up stops being held.
func TestOverShareRefusalsAreHeld(t *testing.T) {
	h := newHarness(t, func(o *bus.Options) { o.RefusalHold, o.HeldRefusals = time.Minute, 1 })
	cfg := workspaceConfig("newsroom")
	cfg.Limits = config.Limits{RatePerSecond: 1.0 / 60, Burst: 1}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	expect(t, h.post(t, "newsroom", tok, snapshot("", "first", 1, "cms")), http.StatusAccepted, "")

	ctx, giveUp := context.WithCancel(context.Background())
	heldDone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages",
			bytes.NewReader(snapshot("", "held", 1, "cms")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			err = fmt.Errorf("answered %d while it should be held", res.StatusCode)
		}
		heldDone <- err
	}()
	testutil.Eventually(t, "the second request is held", 30*time.Second, func() error {
		if m := h.metrics(t); !strings.Contains(m, "storybus_refusals_held 1") {
			return errors.New("storybus_refusals_held is not 1")
		}
		return nil
	})
	// Past the bound, at once: well before the held one's minute is up.
	start := time.Now()
	expect(t, h.post(t, "newsroom", tok, snapshot("", "third", 1, "cms")), http.StatusTooManyRequests, rules.RateLimited)
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the refusal past the bound took %s", took)
	}
	select {
	case err := <-heldDone:
		t.Fatalf("the held request ended early: %v", err)
	default:
	}
	giveUp()
	if err := <-heldDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the held request: %v, want its client's cancellation", err)
	}
	testutil.Eventually(t, "the held request is let go when its client gives up", 30*time.Second, func() error {
		if m := h.metrics(t); !strings.Contains(m, "storybus_refusals_held 0") {
			return errors.New("storybus_refusals_held is not 0")
		}
		return nil
	})
}

// TestHeldRefusalsGiveTheirSlotBack proves a held refusal holds nothing of
// its workspace's share: with one slot, a connection whose request is held
// for its rate limit leaves the slot to another connection of the
// workspace, which is accepted instead of answered workspace.busy.
func TestHeldRefusalsGiveTheirSlotBack(t *testing.T) {
	h := newHarness(t, func(o *bus.Options) { o.RefusalHold = time.Minute })
	cfg := workspaceConfig("newsroom")
	cfg.RequestConcurrency = 1
	cfg.Limits = config.Limits{RatePerSecond: 1.0 / 60, Burst: 1}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	cms := h.token(t, "newsroom", "cms", cmsSecret)
	wire := h.token(t, "newsroom", "wire", wireSecret)
	expect(t, h.post(t, "newsroom", cms, snapshot("", "first", 1, "cms")), http.StatusAccepted, "")

	ctx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages",
			bytes.NewReader(snapshot("", "held", 1, "cms")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+cms)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	testutil.Eventually(t, "cms's second request is held", 30*time.Second, func() error {
		if m := h.metrics(t); !strings.Contains(m, "storybus_refusals_held 1") {
			return errors.New("storybus_refusals_held is not 1")
		}
		return nil
	})
	expect(t, h.post(t, "newsroom", wire, snapshot("", "wire-story", 1, "wire")), http.StatusAccepted, "")
}
