package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/testutil"
)

// TestServeAPoolsWorkspaces runs serve as a pool replica (--pool, on a
// NATS server of its own): a workspace put into the pool afterwards is
// served without a restart, a publish to it is accepted, and the replica
// reports the document in force under its --pool-replica name.
func TestServeAPoolsWorkspaces(t *testing.T) {
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: t.TempDir(), Listen: testutil.FreeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	o := ServeOptions{Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", NATSURL: ns.ClientURL(), Replicas: 1,
		Pool: "shared", PoolReplica: "replica-0"}
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, o, nil, slog.New(slog.DiscardHandler), func(api, _ net.Addr) { ready <- api.String() })
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	var api string
	select {
	case api = <-ready:
	case err := <-done:
		t.Fatalf("Serve ended before serving: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("Serve did not listen within 60s")
	}

	st, err := store.Connect(store.Options{URL: ns.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	p, err := pool.Open(context.Background(), st.JS, "shared", 1)
	if err != nil {
		t.Fatal(err)
	}
	w := cliWorkspace()
	hash, err := p.Put(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the replica reports the document in force", 30*time.Second, func() error {
		got, err := p.StatusesOf(context.Background(), w.ID)
		if err != nil {
			return err
		}
		if got["replica-0"].Hash != hash {
			return fmt.Errorf("statuses %+v", got)
		}
		return nil
	})

	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {w.Connections[0].Name}, "client_secret": {cliCMSSecret}}
	res, err := http.Post("http://"+api+"/v1/tenants/"+w.ID+"/tokens", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.NewDecoder(res.Body).Decode(&tok)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("token: %d", res.StatusCode)
	}
	body := fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.context","system_id":"cms","timestamp":"2026-12-01T09:00:00Z","payload":{"story_id":"pooled","sequence_number":1,"state":"draft","headline":"Pooled"}}`, uuid.NewString())
	req, _ := http.NewRequest(http.MethodPost, "http://"+api+"/v1/tenants/"+w.ID+"/messages", bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("publish to the pooled workspace: %d", res.StatusCode)
	}
}
