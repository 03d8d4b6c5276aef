package bus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/storybus/storybus/bus"
)

// TestApplyOpensWorkspacesAtOnce: workspaces applied at the same time,
// as a pool replica opens its pool's, are all served, each with its own
// configuration; the same workspace applied twice at once, and one
// removed while others are applied, end as the last call left them.
func TestApplyOpensWorkspacesAtOnce(t *testing.T) {
	ns := startNATS(t)
	srv := bus.New(bus.Options{Store: connectStore(t, ns)})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 12 {
		wg.Go(func() {
			if err := srv.Apply(ctx, workspaceConfig(fmt.Sprintf("ws-%d", i))); err != nil {
				errs <- err
			}
		})
	}
	for range 2 {
		// The same workspace twice: one builds it, the other replaces
		// the configuration in place.
		wg.Go(func() {
			if err := srv.Apply(ctx, workspaceConfig("twice")); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range 12 {
		id := fmt.Sprintf("ws-%d", i)
		if cfg, ok := srv.Config(id); !ok || cfg.ID != id {
			t.Errorf("workspace %s: served %v with %+v", id, ok, cfg)
		}
	}
	if _, ok := srv.Config("twice"); !ok {
		t.Error("the workspace applied twice at once is not served")
	}
	if n := len(srv.LoadedConfigs()); n != 13 {
		t.Errorf("%d workspaces served; want 13", n)
	}

	wg.Go(func() { srv.Remove(ctx, "ws-0") })
	wg.Go(func() {
		if err := srv.Apply(ctx, workspaceConfig("late")); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	if _, ok := srv.Config("ws-0"); ok {
		t.Error("ws-0 is served after its removal")
	}
	if _, ok := srv.Config("late"); !ok {
		t.Error("the workspace applied during a removal is not served")
	}
}
