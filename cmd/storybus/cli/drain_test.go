package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
// endpoints can take it out before it stops listening, each answer
// closing its connection, and a connection idle when the drain began
// still answered; then it exits.
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

	// A keep-alive connection, idle when the drain starts.
	idle, err := net.Dial("tcp", api)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idleReader := bufio.NewReader(idle)
	ask := func() (*http.Response, error) {
		if _, err := idle.Write([]byte("GET /v1/tenants/newsroom/messages HTTP/1.1\r\nHost: bus\r\n\r\n")); err != nil {
			return nil, err
		}
		_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(idleReader, nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	if res, err := ask(); err != nil || res.Close {
		t.Fatalf("before the stop: %v, closing %v", err, res != nil && res.Close)
	}

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
	// The idle connection was not closed under its client: its next
	// request is answered, and the answer closes it.
	if res, err := ask(); err != nil || !res.Close || res.StatusCode != http.StatusForbidden {
		t.Fatalf("the idle connection's request while draining: %v %v, want 403 with Connection: close", res, err)
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
