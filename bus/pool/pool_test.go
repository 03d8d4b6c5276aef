package pool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/internal/testutil"
)

const secret = "cms-secret-0123456789abcdef0123456789"

func workspace(id string) *config.Workspace {
	w := &config.Workspace{
		ID:         id,
		SigningKey: id + "-signing-key-0123456789abcdef0123",
		Connections: []config.Connection{{Name: "cms", SecretHash: config.HashSecret(secret), Grant: config.Grant{
			Publish: config.PublishGrant{SystemIDs: []string{"cms"}, MessageTypes: []string{"*"}}}}},
	}
	w.Default()
	return w
}

// putInForce puts w into pool p and waits until each replica named has
// it in force; it returns the document's hash.
func putInForce(t *testing.T, p *pool.Pool, w *config.Workspace, replicas ...string) string {
	t.Helper()
	hash, err := p.Put(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	waitInForce(t, p, w.ID, hash, replicas...)
	return hash
}

// waitInForce waits until each replica named reports workspace ws's
// document hash in force.
func waitInForce(t *testing.T, p *pool.Pool, ws, hash string, replicas ...string) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%s's document %s in force on %v", ws, hash, replicas), 30*time.Second, func() error {
		got, err := p.StatusesOf(context.Background(), ws)
		if err != nil {
			return err
		}
		for _, name := range replicas {
			if got[name].Hash != hash {
				return fmt.Errorf("replica %s reports %+v", name, got[name])
			}
		}
		return nil
	})
}

// replica is one pool replica: a bus server serving the pool's workspaces.
type replica struct {
	srv  *bus.Server
	http *httptest.Server
	stop context.CancelFunc
	done chan error
}

func startReplica(t *testing.T, p *pool.Pool, o bus.Options, name string) *replica {
	t.Helper()
	r := &replica{srv: bus.New(o), done: make(chan error, 1)}
	r.http = httptest.NewServer(r.srv.Handler())
	t.Cleanup(r.http.Close)
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	synced := make(chan struct{})
	go func() { r.done <- p.Serve(ctx, name, r.srv, slog.New(slog.DiscardHandler), func() { close(synced) }) }()
	t.Cleanup(func() {
		stop()
		if err := <-r.done; err != nil {
			t.Errorf("replica %s: %v", name, err)
		}
	})
	select {
	case <-synced:
	case err := <-r.done:
		t.Fatalf("replica %s ended: %v", name, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("replica %s did not sync", name)
	}
	return r
}

// publish gets a token for cms and publishes a fresh snapshot to ws,
// returning the publish's status (0 with the token endpoint's when no
// token was issued).
func (r *replica) publish(t *testing.T, ws string) int {
	t.Helper()
	token, status := r.token(t, ws)
	if status != http.StatusOK {
		return status
	}
	return r.post(t, ws, token, snapshot(uuid.NewString())).status
}

// token asks for a token of workspace ws's connection cms: the token and
// the answer's status.
func (r *replica) token(t *testing.T, ws string) (string, int) {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}}
	req, _ := http.NewRequest(http.MethodPost, r.http.URL+"/v1/tenants/"+ws+"/tokens", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("cms", secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.NewDecoder(res.Body).Decode(&tok)
	return tok.AccessToken, res.StatusCode
}

// snapshot is a story.context message of a story of its own, message_id id.
func snapshot(id string) string {
	return fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.context","system_id":"cms","timestamp":"2026-12-01T09:00:00Z","payload":{"story_id":%q,"sequence_number":1,"state":"draft","headline":"Pool"}}`,
		id, "story-"+id[:8])
}

// storyEvent is a story.event message, message_id id: the bus marks its
// record published after the publish (snapshots it does not).
func storyEvent(id string) string {
	return fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.event","system_id":"cms","timestamp":"2026-12-01T09:00:00Z","payload":{"story_id":"story-1","event":"published","occurred_at":"2026-12-01T09:00:00Z"}}`, id)
}

// answer is what the bus answered a publish.
type answer struct {
	status     int
	rule       string
	retryAfter string
}

// post publishes body to workspace ws with token.
func (r *replica) post(t *testing.T, ws, token, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.http.URL+"/v1/tenants/"+ws+"/messages", bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var refusal struct {
		Violations []struct {
			Rule string `json:"rule"`
		} `json:"violations"`
	}
	_ = json.NewDecoder(res.Body).Decode(&refusal)
	a := answer{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After")}
	if len(refusal.Violations) > 0 {
		a.rule = refusal.Violations[0].Rule
	}
	return a
}

// TestPoolReplicasServeThePoolsWorkspaces runs two replicas of one pool on
// one store: a workspace put into the pool is served by both, restarting
// neither, and each reports the document it has in force; a changed
// document is in force on both; a document that does not apply is
// reported on that workspace alone and leaves the previous one in force;
// a removed workspace is served by neither; and a replica started later
// converges to the pool's current set.
func TestPoolReplicasServeThePoolsWorkspaces(t *testing.T) {
	_, st := storetest.Embedded(t)
	ctx := context.Background()
	p, err := pool.Open(ctx, st.JS, "shared", 1)
	if err != nil {
		t.Fatal(err)
	}
	o := bus.Options{Store: st, RequestTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	a, b := startReplica(t, p, o, "a"), startReplica(t, p, o, "b")

	// Onboarding: both replicas serve it, neither restarted.
	start := time.Now()
	hash, err := p.Put(ctx, workspace("brand-1"))
	if err != nil {
		t.Fatal(err)
	}
	waitInForce(t, p, "brand-1", hash, "a", "b")
	t.Logf("in force on both replicas %s after the put", time.Since(start).Round(time.Millisecond))
	for _, r := range []*replica{a, b} {
		if s := r.publish(t, "brand-1"); s != http.StatusAccepted {
			t.Fatalf("publish on a replica: %d", s)
		}
	}
	if _, err := p.Put(ctx, workspace("brand-2")); err != nil {
		t.Fatal(err)
	}

	// A change (a rotated secret: the hash of another) is in force on both.
	changed := workspace("brand-1")
	changed.Connections[0].SecretHash = config.HashSecret("rotated-secret-0123456789abcdef0123")
	hash2, err := p.Put(ctx, changed)
	if err != nil {
		t.Fatal(err)
	}
	waitInForce(t, p, "brand-1", hash2, "a", "b")
	if s := a.publish(t, "brand-1"); s != http.StatusUnauthorized {
		t.Fatalf("the old secret after the rotation: %d, want 401", s)
	}

	// A document that does not apply (a module that does not compile) is
	// refused on that workspace alone; its previous document stays.
	bad := workspace("brand-2")
	bad.Policies = []config.PolicyModule{{Name: "broken", Rego: "package storybus.tenant.broken\n\ndeny contains {"}}
	b2, _ := json.Marshal(bad)
	if _, err := p.Documents.Put(ctx, "brand-2", b2); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the broken document is refused on both replicas", 30*time.Second, func() error {
		got, err := p.StatusesOf(ctx, "brand-2")
		if err != nil {
			return err
		}
		for _, name := range []string{"a", "b"} {
			if got[name].Refused != config.DocumentHash(b2) || got[name].Error == "" || got[name].Hash == "" {
				return fmt.Errorf("replica %s reports %+v", name, got[name])
			}
		}
		return nil
	})
	if s := b.publish(t, "brand-2"); s != http.StatusAccepted {
		t.Fatalf("brand-2 under its previous document: %d", s)
	}
	if s := b.publish(t, "brand-1"); s == http.StatusAccepted || s == 0 {
		t.Fatalf("brand-1 with the old secret on the other replica: %d", s)
	}

	// A replica started now serves the current set at once.
	c := startReplica(t, p, o, "c")
	if _, ok := c.srv.Config("brand-1"); !ok {
		t.Fatal("a late replica does not serve brand-1 once synced")
	}
	waitInForce(t, p, "brand-1", hash2, "c")

	// Removed: served by none, its status gone.
	if err := p.Delete(ctx, "brand-1"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "brand-1 is served by no replica", 30*time.Second, func() error {
		for name, r := range map[string]*replica{"a": a, "b": b, "c": c} {
			if _, ok := r.srv.Config("brand-1"); ok {
				return fmt.Errorf("replica %s still serves it", name)
			}
		}
		if got, _ := p.StatusesOf(ctx, "brand-1"); len(got) != 0 {
			return fmt.Errorf("statuses left: %v", got)
		}
		return nil
	})
	if s := a.publish(t, "brand-1"); s != http.StatusForbidden {
		t.Fatalf("a removed workspace's token request: %d, want 403 as for an unknown workspace", s)
	}
}

// fakeTarget is a Target of function fields.
type fakeTarget struct {
	apply  func(ctx context.Context, cfg *config.Workspace) error
	remove func(ctx context.Context, id string)
}

var _ pool.Target = (*fakeTarget)(nil)

func (f *fakeTarget) Apply(ctx context.Context, cfg *config.Workspace) error {
	return f.apply(ctx, cfg)
}
func (f *fakeTarget) Remove(ctx context.Context, id string) { f.remove(ctx, id) }

// TestAStoreFailureIsAppliedAgain: a document whose Apply failed in the
// store (store.ErrUnavailable: the cluster did not create a stream in
// time, say) is applied again until it is in force, and reported so; one
// the target refused for itself is not applied again.
func TestAStoreFailureIsAppliedAgain(t *testing.T) {
	_, st := storetest.Embedded(t)
	ctx := context.Background()
	p, err := pool.Open(ctx, st.JS, "retried", 1)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	applied := map[string]int{}
	target := &fakeTarget{
		apply: func(_ context.Context, cfg *config.Workspace) error {
			mu.Lock()
			defer mu.Unlock()
			applied[cfg.ID]++
			switch {
			case cfg.ID == "flaky" && applied[cfg.ID] <= 2:
				return fmt.Errorf("workspace %q: %w", cfg.ID, store.Unavailable(context.DeadlineExceeded))
			case cfg.ID == "refused":
				return errors.New("a module that does not compile")
			}
			return nil
		},
		remove: func(context.Context, string) {},
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Serve(runCtx, "r", target, slog.New(slog.DiscardHandler), nil) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	flaky, err := p.Put(ctx, workspace("flaky"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Put(ctx, workspace("refused")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the flaky workspace in force after the store's failures", 30*time.Second, func() error {
		got, err := p.StatusesOf(ctx, "flaky")
		if err != nil {
			return err
		}
		if got["r"].Hash != flaky || got["r"].Error != "" {
			return fmt.Errorf("status %+v", got["r"])
		}
		return nil
	})
	got, err := p.StatusesOf(ctx, "refused")
	if err != nil {
		t.Fatal(err)
	}
	if got["r"].Refused == "" || got["r"].Error == "" {
		t.Fatalf("the refused document's status: %+v", got["r"])
	}
	mu.Lock()
	defer mu.Unlock()
	if applied["flaky"] != 3 || applied["refused"] != 1 {
		t.Fatalf("applied %v: want flaky 3 times, refused once", applied)
	}
}

// TestABurstOfChangesIsAppliedConcurrently: once a replica serves, the
// changes waiting behind the one it applies (Tenants placed in a burst)
// are applied at once, not one after the other.
func TestABurstOfChangesIsAppliedConcurrently(t *testing.T) {
	_, st := storetest.Embedded(t)
	ctx := context.Background()
	p, err := pool.Open(ctx, st.JS, "burst", 1)
	if err != nil {
		t.Fatal(err)
	}
	firstStarted, gate := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	running, most := 0, 0
	target := &fakeTarget{
		apply: func(_ context.Context, cfg *config.Workspace) error {
			if cfg.ID == "first" {
				close(firstStarted)
				<-gate
				return nil
			}
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			// Held until another is applied beside it, or 2 s.
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				mu.Lock()
				r := running
				mu.Unlock()
				if r > 1 {
					break
				}
			}
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		},
		remove: func(context.Context, string) {},
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	synced := make(chan struct{})
	go func() { done <- p.Serve(runCtx, "r", target, slog.New(slog.DiscardHandler), func() { close(synced) }) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-synced
	if _, err := p.Put(ctx, workspace("first")); err != nil {
		t.Fatal(err)
	}
	<-firstStarted
	names := []string{"burst-0", "burst-1", "burst-2", "burst-3", "burst-4", "burst-5", "burst-6", "burst-7"}
	hashes := map[string]string{}
	for _, n := range names {
		if hashes[n], err = p.Put(ctx, workspace(n)); err != nil {
			t.Fatal(err)
		}
	}
	// The changes reach the replica's watch while "first" is applied.
	time.Sleep(300 * time.Millisecond)
	close(gate)
	testutil.Eventually(t, "the burst in force", 30*time.Second, func() error {
		for _, n := range names {
			got, err := p.StatusesOf(ctx, n)
			if err != nil {
				return err
			}
			if got["r"].Hash != hashes[n] {
				return fmt.Errorf("%s: status %+v", n, got["r"])
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Fatalf("at most %d of the burst applied at once: the changes waiting were applied one after the other", most)
	}
}
