package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/internal/testutil"
)

// TestServeDrainsBeforeItStops proves a stopping bus fails readiness at
// once and goes on answering for its drain period, so that a Service's
// endpoints can take it out before it stops listening; then it exits.
func TestServeDrainsBeforeItStops(t *testing.T) {
	const drain = 5 * time.Second
	o := ServeOptions{Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", DataDir: t.TempDir(), Sync: SyncAlways, DrainPeriod: drain}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ready := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, o, []*config.Workspace{cliWorkspace()}, slog.New(slog.DiscardHandler), func(api, ops net.Addr) {
			ready <- [2]string{api.String(), ops.String()}
		})
	}()
	var api, ops string
	select {
	case a := <-ready:
		api, ops = a[0], a[1]
	case err := <-done:
		t.Fatalf("Serve ended before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not listen within 30s")
	}
	status := func(url string) (int, error) {
		res, err := http.Get(url)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	testutil.Eventually(t, "the bus is ready", 30*time.Second, func() error {
		if s, err := status("http://" + ops + "/readyz"); err != nil || s != http.StatusOK {
			return fmt.Errorf("/readyz %d %v", s, err)
		}
		return nil
	})

	stopped := time.Now()
	stop()
	testutil.Eventually(t, "/readyz fails once the bus is stopping", drain, func() error {
		if s, err := status("http://" + ops + "/readyz"); err != nil || s != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d %v", s, err)
		}
		return nil
	})
	// Still answering on the publish port while it drains: a publish
	// without a token is refused as usual, not a refused connection.
	if s, err := status("http://" + api + "/v1/tenants/newsroom/messages"); err != nil || s == 0 {
		t.Fatalf("the publish port while draining: %d %v", s, err)
	}
	select {
	case err := <-done:
		if took := time.Since(stopped); took < drain {
			t.Fatalf("Serve returned %s after the stop, before its %s drain period (%v)", took, drain, err)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(drain + 60*time.Second):
		t.Fatal("Serve did not return after its drain period")
	}
}
