package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/bus/tlsconfig"
)

// poolReplica is one replica of a pool run in this process as serve
// --pool runs it: a bus on the pool's cluster serving the pool's
// workspaces as they are put there, and its publish API on loopback.
type poolReplica struct {
	srv *bus.Server
	url string
}

// startPoolReplica runs replica name of pool poolName on the cluster at
// natsURL until the test ends, and returns once it has applied what the
// pool holds.
func startPoolReplica(t *testing.T, natsURL, poolName, name string) *poolReplica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *bus.Server, 1)
	done := make(chan error, 1)
	log := slog.New(slog.DiscardHandler)
	go func() {
		// Hosts: the replica takes the workspaces' own key pairs, as one
		// serving HTTPS does (its publish API here is plain HTTP).
		done <- bus.Run(ctx, bus.RunOptions{NATSURL: natsURL, Replicas: 1, SharedBuckets: true, Bus: bus.Options{Logger: log, RequestTimeout: 10 * time.Second, Hosts: tlsconfig.NewHosts()}},
			func(ctx context.Context, srv *bus.Server) error {
				p, err := pool.Open(ctx, srv.Store().JS, poolName, 1)
				if err != nil {
					return err
				}
				synced := make(chan struct{})
				served := make(chan error, 1)
				go func() { served <- p.Serve(ctx, name, srv, log, func() { close(synced) }) }()
				select {
				case <-synced:
				case err := <-served:
					return err
				}
				ready <- srv
				return <-served
			})
	}()
	var srv *bus.Server
	select {
	case srv = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("replica %s ended: %v", name, err)
	case <-time.After(waitFor):
		cancel()
		t.Fatalf("replica %s did not sync within %s", name, waitFor)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica %s: %v", name, err)
		}
	})
	return &poolReplica{srv: srv, url: hs.URL}
}

// serveSharedPool waits for BusPool ns/shared, created on the cluster at
// natsURL, to reach its cluster (into bp), runs its one replica
// shared-pool-0 in this process with a ready pod standing for it, and
// returns the replica and the pool's buckets as st sees them.
func serveSharedPool(t *testing.T, ns, natsURL string, st *store.Store, bp *v1alpha1.BusPool) (*poolReplica, *pool.Pool) {
	t.Helper()
	waitCondition(t, ns, "shared", bp, busPoolGen, v1alpha1.ConditionClusterReady, metav1.ConditionTrue, v1alpha1.ReasonClusterConnected)
	replica := startPoolReplica(t, natsURL, ns+"_shared", "shared-pool-0")
	startFakePoolPod(t, ns, "shared", "shared-pool-0")
	sp, err := pool.Open(context.Background(), st.JS, ns+"_shared", 1)
	if err != nil {
		t.Fatal(err)
	}
	return replica, sp
}

// token asks the replica for a token of workspace ws; "" with the status
// when it issues none.
func (r *poolReplica) token(ws, clientID, secret string) (string, int) {
	req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/tenants/"+ws+"/tokens", strings.NewReader("grant_type=client_credentials"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0
	}
	defer res.Body.Close()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.NewDecoder(res.Body).Decode(&tr)
	if res.StatusCode != http.StatusOK {
		return "", res.StatusCode
	}
	return tr.AccessToken, res.StatusCode
}

// publish sends a fresh snapshot to ws with token and returns the answer.
func (r *poolReplica) publish(ws, token string) (int, string) {
	body := fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.context","system_id":"cms","timestamp":"2026-12-01T09:00:00Z","payload":{"story_id":%q,"sequence_number":1,"state":"draft","headline":"Pooled"}}`,
		uuid.NewString(), "story-"+uuid.NewString()[:8])
	req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/tenants/"+ws+"/messages", bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// publishWith gets a token with the credentials and publishes; the status
// is the token endpoint's when it issues none.
func (r *poolReplica) publishWith(ws, clientID, secret string) int {
	tok, status := r.token(ws, clientID, secret)
	if tok == "" {
		return status
	}
	status, _ = r.publish(ws, tok)
	return status
}

// TestPooledTenant places a Tenant on a BusPool whose replica runs in this
// process against a real NATS server: the operator makes no bus of the
// Tenant's own, writes its compiled configuration (signing key inline)
// into the pool's bucket, and the Tenant is Ready once the replica reports
// it in force; its first publish is answered 202 without a restart; a
// rotated secret is in force on the replica; a refusing replica is
// reported with its error; and deleting the Tenant removes its key, stops
// the replica serving it and, under deletionPolicy delete, deletes its
// stream on the cluster.
func TestPooledTenant(t *testing.T) {
	nats, st := startPoolCluster(t)
	ns := newNamespace(t)
	ctx := context.Background()
	create(t, newBusPool(ns, "shared", nats.ClientURL()))
	bp := &v1alpha1.BusPool{}
	replica, sp := serveSharedPool(t, ns, nats.ClientURL(), st, bp)

	// Onboarding: the Tenant, its Connection and Grant, then publish
	// until the replica accepts.
	start := time.Now()
	create(t, newTenant(ns, "brand", func(tn *v1alpha1.Tenant) {
		tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared"}
		tn.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete
	}))
	create(t, newConnection(ns, "cms", "brand"))
	create(t, newGrant(ns, "cms-publish", "cms", &v1alpha1.PublishGrant{SystemIDs: []string{"cms"}, MessageTypes: []string{"story.context"}}, nil))
	var clientID, secret string
	eventually(t, "the first publish answered 202", func() error {
		sec := &corev1.Secret{}
		if err := get(ns, "cms-credentials", sec); err != nil {
			return err
		}
		clientID, secret = string(sec.Data[v1alpha1.CredentialsClientIDKey]), string(sec.Data[v1alpha1.CredentialsClientSecretKey])
		if s := replica.publishWith("brand", clientID, secret); s != http.StatusAccepted {
			return fmt.Errorf("publish: %d", s)
		}
		return nil
	})
	firstAccepted := time.Since(start)
	t.Logf("a pooled Tenant: created to its first publish answered 202 in %s", firstAccepted.Round(time.Millisecond))
	if firstAccepted > 30*time.Second {
		t.Errorf("onboarding took %s", firstAccepted)
	}

	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	t.Logf("created to Ready in %s", time.Since(start).Round(time.Millisecond))
	if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionPoolReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonPlaced {
		t.Errorf("PoolReady %+v", c)
	}
	if want := "http://shared-pool." + ns + ".svc.cluster.local:8080/v1/tenants/brand"; tn.Status.Endpoint != want {
		t.Errorf("endpoint %q, want %q", tn.Status.Endpoint, want)
	}
	if tn.Status.Replicas != 3 || tn.Status.ReadyReplicas != 1 || tn.Status.LoadedConfigHash != tn.Status.ConfigHash {
		t.Errorf("replicas %d/%d, loaded %q, compiled %q", tn.Status.ReadyReplicas, tn.Status.Replicas, tn.Status.LoadedConfigHash, tn.Status.ConfigHash)
	}
	// The document in the bucket is the compiled configuration, its
	// signing key inline, and its hash is the one the replica reports.
	e, err := sp.Documents.Get(ctx, "brand")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := config.Parse(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if doc.Hash != tn.Status.ConfigHash || doc.SigningKey == "" || doc.SigningKeyFile != "" || len(doc.Connections) != 1 {
		t.Errorf("document: hash %q (compiled %q), signing key inline %v, file %q, %d connections",
			doc.Hash, tn.Status.ConfigHash, doc.SigningKey != "", doc.SigningKeyFile, len(doc.Connections))
	}
	if pl := tn.Status.Pool; pl == nil || pl.Name != "shared" || pl.DocumentHash != config.DocumentHash(e.Value()) {
		t.Errorf("status.pool %+v, document %s", pl, config.DocumentHash(e.Value()))
	}
	// Placed from its creation, it has no volumes: only the pool's
	// finalizer, which applies the deletion policy on the cluster.
	if !slices.Equal(tn.Finalizers, []string{v1alpha1.PoolFinalizer}) {
		t.Errorf("finalizers %v, want only %s", tn.Finalizers, v1alpha1.PoolFinalizer)
	}
	statuses, err := sp.StatusesOf(ctx, "brand")
	if err != nil || statuses["shared-pool-0"].Hash != config.DocumentHash(e.Value()) {
		t.Errorf("the replica reports %+v (%v)", statuses, err)
	}
	// No bus of its own.
	consistently(t, "no bus of the Tenant's own", time.Second, func() error {
		if err := gone(ns, "brand-bus", &appsv1.StatefulSet{}); err != nil {
			return err
		}
		return gone(ns, "brand-bus", &corev1.Service{})
	})
	waitCondition(t, ns, "cms", &v1alpha1.Connection{}, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	eventually(t, "the pool counts the Tenant", func() error {
		if err := get(ns, "shared", bp); err != nil {
			return err
		}
		if bp.Status.Tenants != 1 || len(bp.Status.ReplicaStatuses) != 1 || bp.Status.ReplicaStatuses[0].Workspaces != 1 {
			return fmt.Errorf("tenants %d, replicas %+v", bp.Status.Tenants, bp.Status.ReplicaStatuses)
		}
		return nil
	})
	// The count is the index's, not a list of the Tenants.
	informer, err := managerCache.GetInformer(ctx, &v1alpha1.Tenant{})
	if err != nil {
		t.Fatal(err)
	}
	indexed, ok := informer.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		t.Fatalf("the Tenants' informer %T keeps no index: pools list their Tenants to count them", informer)
	}
	if keys, err := indexed.GetIndexer().IndexKeys(indexPlacedOn, ns+"/shared"); err != nil || len(keys) != 1 {
		t.Errorf("Tenants placed on the pool by the index: %v (%v), want the one", keys, err)
	}

	t.Run("a rotated secret is in force on the replica", func(t *testing.T) {
		oldToken, _ := replica.token("brand", clientID, secret)
		if oldToken == "" {
			t.Fatal("no token with the current secret")
		}
		rotated := time.Now()
		update(t, ns, "cms", &v1alpha1.Connection{}, func(c *v1alpha1.Connection) { c.Spec.Credentials.Rotate++ })
		var newSecret string
		eventually(t, "the rotated secret is in force", func() error {
			sec := &corev1.Secret{}
			if err := get(ns, "cms-credentials", sec); err != nil {
				return err
			}
			if newSecret = string(sec.Data[v1alpha1.CredentialsClientSecretKey]); newSecret == secret {
				return errNotYet
			}
			if s, body := replica.publish("brand", oldToken); s != http.StatusUnauthorized || !strings.Contains(body, "auth.token.revoked") {
				return fmt.Errorf("the old token: %d %s", s, body)
			}
			if s := replica.publishWith("brand", clientID, newSecret); s != http.StatusAccepted {
				return fmt.Errorf("the new secret: %d", s)
			}
			return nil
		})
		t.Logf("rotation requested to in force on the replica in %s", time.Since(rotated).Round(time.Millisecond))
		if s := replica.publishWith("brand", clientID, secret); s != http.StatusUnauthorized {
			t.Errorf("the old secret after the rotation: %d, want 401", s)
		}
		waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		secret = newSecret
	})

	t.Run("a replica that refuses the document is named with its error", func(t *testing.T) {
		if err := get(ns, "brand", tn); err != nil {
			t.Fatal(err)
		}
		hash := tn.Status.Pool.DocumentHash
		// A second ready replica that refused the document: what a
		// replica writes when the document does not apply there.
		startFakePoolPod(t, ns, "shared", "shared-pool-1")
		b, _ := json.Marshal(pool.Status{Hash: "sha256:previous", Refused: hash, Error: "policy brand: rego_parse_error", At: time.Now()})
		if _, err := sp.Statuses.Put(ctx, "brand.shared-pool-1", b); err != nil {
			t.Fatal(err)
		}
		waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConfigurationRefused)
		if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionConfigurationLoaded); c == nil || !strings.Contains(c.Message, "shared-pool-1") ||
			!strings.Contains(c.Message, "rego_parse_error") {
			t.Errorf("ConfigurationLoaded %+v: want the replica and its error", c)
		}
		if tn.Status.LoadedConfigHash != "" {
			t.Errorf("loadedConfigHash %q while a ready replica refuses it", tn.Status.LoadedConfigHash)
		}
		// The replica goes: every ready replica serves it again.
		if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared-pool-1"}}); err != nil {
			t.Fatal(err)
		}
		waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	})

	t.Run("deleting the Tenant stops serving it and deletes its data", func(t *testing.T) {
		if _, err := st.JS.Stream(ctx, store.StreamName("brand")); err != nil {
			t.Fatalf("the workspace's stream before the deletion: %v", err)
		}
		deleted := time.Now()
		if err := k8s.Delete(ctx, newTenant(ns, "brand")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the replica stops serving the workspace", func() error {
			if _, ok := replica.srv.Config("brand"); ok {
				return errNotYet
			}
			return nil
		})
		t.Logf("deleted to no longer served in %s", time.Since(deleted).Round(time.Millisecond))
		eventually(t, "the Tenant, its key and its stream are gone", func() error {
			if err := gone(ns, "brand", &v1alpha1.Tenant{}); err != nil {
				return err
			}
			if _, err := sp.Documents.Get(ctx, "brand"); !errors.Is(err, jetstream.ErrKeyNotFound) {
				return fmt.Errorf("the key: %v", err)
			}
			if _, err := st.JS.Stream(ctx, store.StreamName("brand")); !errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("the stream: %v", err)
			}
			return nil
		})
		if _, status := replica.token("brand", clientID, secret); status != http.StatusForbidden {
			t.Errorf("a token of the deleted workspace: %d, want 403 as for an unknown workspace", status)
		}
		waitEvent(t, ns, "Tenant", "brand", "DataDeleted")
	})
}

// TestPoolPlacementIsExplained: a Tenant that cannot be placed says why,
// never waiting silently: a pool that does not exist, a namespace the pool
// does not admit (and one its selector admits once labelled), and a
// workspace id another Tenant already holds on the pool.
func TestPoolPlacementIsExplained(t *testing.T) {
	nats, _ := startPoolCluster(t)
	poolNS, other := newNamespace(t), newNamespace(t)
	create(t, newBusPool(poolNS, "same", nats.ClientURL()))
	create(t, newBusPool(poolNS, "selected", nats.ClientURL(), func(p *v1alpha1.BusPool) {
		p.Spec.AllowedTenants = &v1alpha1.AllowedTenants{Namespaces: &v1alpha1.TenantNamespaces{
			From: v1alpha1.NamespacesFromSelector, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"storybus.example/pool": "selected"}}}}
	}))
	onPool := func(name string) func(*v1alpha1.Tenant) {
		return func(tn *v1alpha1.Tenant) { tn.Spec.Pool = &v1alpha1.PoolReference{Name: name, Namespace: poolNS} }
	}

	create(t, newTenant(other, "missing", onPool("nowhere")))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, other, "missing", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPoolNotFound)
	if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionPoolReady); c == nil || !strings.Contains(c.Message, poolNS+"/nowhere") {
		t.Errorf("PoolReady %+v: want the pool named", c)
	}

	create(t, newTenant(other, "outsider", onPool("same")))
	waitCondition(t, other, "outsider", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNamespaceNotAllowed)
	if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionPoolReady); c == nil || c.Reason != v1alpha1.ReasonNamespaceNotAllowed || !strings.Contains(c.Message, "Same") {
		t.Errorf("PoolReady %+v: want NamespaceNotAllowed saying why", c)
	}
	if tn.Status.Pool != nil || slices.Contains(tn.Finalizers, v1alpha1.PoolFinalizer) {
		t.Errorf("a Tenant the pool does not admit is placed: %+v, finalizers %v", tn.Status.Pool, tn.Finalizers)
	}

	create(t, newTenant(other, "candidate", onPool("selected")))
	waitCondition(t, other, "candidate", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionFalse, v1alpha1.ReasonNamespaceNotAllowed)
	update(t, "", other, &corev1.Namespace{}, func(n *corev1.Namespace) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["storybus.example/pool"] = "selected"
	})
	waitCondition(t, other, "candidate", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced)

	// The same workspace id on one pool: the Tenant placed first keeps it.
	create(t, newTenant(poolNS, "first", onPool("same"), func(tn *v1alpha1.Tenant) { tn.Spec.WorkspaceID = "desk" }))
	waitCondition(t, poolNS, "first", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced)
	create(t, newTenant(poolNS, "second", onPool("same"), func(tn *v1alpha1.Tenant) { tn.Spec.WorkspaceID = "desk" }))
	waitCondition(t, poolNS, "second", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonWorkspaceConflict)
	if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionPoolReady); c == nil || !strings.Contains(c.Message, poolNS+"/first") {
		t.Errorf("PoolReady %+v: want the holder named", c)
	}
	// The holder goes: the other takes the workspace.
	if err := k8s.Delete(context.Background(), newTenant(poolNS, "first")); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, poolNS, "second", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced)
}

// TestPoolAndOwnBusShareNoWorkspace: a pooled Tenant and a Tenant with a
// bus of its own on the pool's cluster cannot use the same workspace id,
// which names the same stream and buckets there: whichever serves first
// keeps it, the other says who holds it, and takes it once the holder
// goes.
func TestPoolAndOwnBusShareNoWorkspace(t *testing.T) {
	nats, _ := startPoolCluster(t)
	ns := newNamespace(t)
	create(t, newBusPool(ns, "shared", nats.ClientURL()))
	onPool := func(tn *v1alpha1.Tenant) { tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared"} }
	external := func(tn *v1alpha1.Tenant) {
		tn.Spec.Storage = &v1alpha1.TenantStorage{External: &v1alpha1.ExternalStorage{URL: nats.ClientURL()}}
	}
	workspace := func(id string) func(*v1alpha1.Tenant) {
		return func(tn *v1alpha1.Tenant) { tn.Spec.WorkspaceID = id }
	}

	// A bus of its own serves first: the pooled Tenant waits.
	create(t, newTenant(ns, "own", external, workspace("desk")))
	eventually(t, "own's bus", func() error { return get(ns, "own-bus", &appsv1.StatefulSet{}) })
	create(t, newTenant(ns, "pooled", onPool, workspace("desk")))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "pooled", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionFalse, v1alpha1.ReasonWorkspaceConflict)
	if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionPoolReady); c == nil || !strings.Contains(c.Message, ns+"/own") || !strings.Contains(c.Message, "bus of its own") {
		t.Errorf("PoolReady %+v: want the bus of its own named", c)
	}
	if tn.Status.Pool != nil {
		t.Errorf("the waiting Tenant is placed: %+v", tn.Status.Pool)
	}
	// The holder goes: the pooled Tenant is placed.
	if err := k8s.Delete(context.Background(), newTenant(ns, "own")); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ns, "pooled", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced)

	// A pooled Tenant placed first: a bus of its own on the cluster waits,
	// and gets no StatefulSet.
	create(t, newTenant(ns, "late", external, workspace("desk")))
	waitCondition(t, ns, "late", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonWorkspaceConflict)
	if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionReady); c == nil || !strings.Contains(c.Message, ns+"/pooled") {
		t.Errorf("Ready %+v: want the pooled Tenant named", c)
	}
	if err := get(ns, "late-bus", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("the waiting Tenant got a bus: %v", err)
	}
	// The pooled Tenant leaves the pool's cluster (deleted): the bus of
	// its own starts.
	if err := k8s.Delete(context.Background(), newTenant(ns, "pooled")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "late's bus", func() error { return get(ns, "late-bus", &appsv1.StatefulSet{}) })
}

// TestTenantMovesBetweenBusAndPool moves a Tenant with a bus of its own to
// a pool and back: on the pool its StatefulSet and Services go and its
// volume claim policy keeps the volume; back on a bus of its own its
// document leaves the pool and its StatefulSet comes back, claiming the
// same volume.
func TestTenantMovesBetweenBusAndPool(t *testing.T) {
	nats, st := startPoolCluster(t)
	ns := newNamespace(t)
	ctx := context.Background()
	create(t, newBusPool(ns, "shared", nats.ClientURL()))
	create(t, newTenant(ns, "desk", func(tn *v1alpha1.Tenant) { tn.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete }))
	sts := &appsv1.StatefulSet{}
	mustGet(t, ns, "desk-bus", sts)
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		t.Fatalf("retention %+v: the test needs a bus whose volumes go with its StatefulSet", p)
	}

	// A finalizer of the test's holds the StatefulSet once deleted, so
	// that the test sees what the operator deleted.
	const hold = "storybus.test/hold"
	update(t, ns, "desk-bus", &appsv1.StatefulSet{}, func(s *appsv1.StatefulSet) { s.Finalizers = append(s.Finalizers, hold) })

	update(t, ns, "desk", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared"} })
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "desk", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced)
	eventually(t, "the Tenant's own bus goes, keeping its volumes", func() error {
		if err := get(ns, "desk-bus", sts); err != nil {
			return err
		}
		if sts.DeletionTimestamp.IsZero() {
			return errNotYet
		}
		if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
			return fmt.Errorf("deleted with claim policy %+v", p)
		}
		if err := gone(ns, "desk-bus", &corev1.Service{}); err != nil {
			return err
		}
		return gone(ns, "desk-bus-ops", &corev1.Service{})
	})
	update(t, ns, "desk-bus", &appsv1.StatefulSet{}, func(s *appsv1.StatefulSet) {
		s.Finalizers = slices.DeleteFunc(s.Finalizers, func(f string) bool { return f == hold })
	})
	sp, err := pool.Open(ctx, st.JS, ns+"_shared", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Documents.Get(ctx, "desk"); err != nil {
		t.Fatalf("the document on the pool: %v", err)
	}
	// The volumes kept from its own bus go by the deletion policy: the
	// finalizer that applies it stays.
	if err := get(ns, "desk", tn); err != nil || !slices.Contains(tn.Finalizers, v1alpha1.Finalizer) {
		t.Errorf("finalizers of a Tenant moved to a pool with its volumes: %v (%v)", tn.Finalizers, err)
	}

	update(t, ns, "desk", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.Pool = nil })
	eventually(t, "back on a bus of its own", func() error {
		if err := get(ns, "desk", tn); err != nil {
			return err
		}
		if tn.Status.Pool != nil || findCondition(tn.Status.Conditions, v1alpha1.ConditionPoolReady) != nil || slices.Contains(tn.Finalizers, v1alpha1.PoolFinalizer) {
			return fmt.Errorf("status.pool %+v, conditions %+v, finalizers %v", tn.Status.Pool, tn.Status.Conditions, tn.Finalizers)
		}
		if _, err := sp.Documents.Get(ctx, "desk"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("the document on the pool: %v", err)
		}
		sts := &appsv1.StatefulSet{}
		if err := get(ns, "desk-bus", sts); err != nil {
			return err
		}
		if !sts.DeletionTimestamp.IsZero() || sts.Spec.VolumeClaimTemplates[0].Name != dataVolume {
			return fmt.Errorf("the StatefulSet: deleting %v, claims %v", sts.DeletionTimestamp, sts.Spec.VolumeClaimTemplates)
		}
		return nil
	})
}

// TestPoolDocumentInlinesKeyFiles: the pool's document is the compiled
// file with the key files it names inline, and a file the Secret does not
// hold yet waits for it rather than placing a document without it.
func TestPoolDocumentInlinesKeyFiles(t *testing.T) {
	file := []byte(`apiVersion: bus.storybus.io/v1alpha1
kind: WorkspaceConfig
workspace: brand
signingKeyFile: /etc/storybus/config/signingKey
connections:
- name: cms
  iam:
    accessKeyID: AKIAEXAMPLE
    secretAccessKeyFile: /etc/storybus/config/iam.cms.secretAccessKey
configHash: sha256:compiled
`)
	files := map[string][]byte{
		"signingKey":                []byte("0123456789abcdef0123456789abcdef\n"),
		"iam.cms.secretAccessKey":   []byte("wJalrXUtnFEMI/K7MDENG\n"),
		"iam.other.secretAccessKey": []byte("not named"),
	}
	doc, hash, err := poolDocument(file, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := config.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	iam := w.Connections[0].IAM
	if hash != "sha256:compiled" || w.Hash != hash || w.SigningKey != "0123456789abcdef0123456789abcdef" || w.SigningKeyFile != "" ||
		iam.SecretAccessKey != "wJalrXUtnFEMI/K7MDENG" || iam.SecretAccessKeyFile != "" {
		t.Errorf("document %s (hash %s)", doc, hash)
	}
	delete(files, "iam.cms.secretAccessKey")
	if _, _, err := poolDocument(file, files, nil); !errors.Is(err, errPhasesDone) {
		t.Errorf("a key file the Secret lacks: %v, want to wait for it", err)
	}
}

// TestPoolReplicaAsTheOperatorRunsIt runs a pool replica exactly as the
// StatefulSet the operator writes says (the storybus binary, its args and
// environment, the pod's name from the downward API), against a real NATS
// server: once a Tenant is placed it becomes ready, reports the Tenant's
// document under its pod's name, and answers the Tenant's publish 202.
func TestPoolReplicaAsTheOperatorRunsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the storybus binary")
	}
	nats, _ := startPoolCluster(t)
	ns := newNamespace(t)
	create(t, newBusPool(ns, "shared", nats.ClientURL()))
	create(t, newTenant(ns, "brand", func(tn *v1alpha1.Tenant) { tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared"} }))
	create(t, newConnection(ns, "cms", "brand"))
	create(t, newGrant(ns, "cms-publish", "cms", &v1alpha1.PublishGrant{SystemIDs: []string{"cms"}, MessageTypes: []string{"story.context"}}, nil))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced)

	// startPod waits for the replica's readiness probe: a replica is
	// ready once it serves a workspace.
	p := startPod(t, ns, "shared-pool")
	startFakePoolPod(t, ns, "shared", "shared-pool-0")
	waitCondition(t, ns, "brand", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	replica := &poolReplica{url: "http://" + p.ports["http"]}
	clientID, secret := credentials(t, ns, "cms")
	eventually(t, "the replica accepts the Tenant's publish", func() error {
		if s := replica.publishWith("brand", clientID, secret); s != http.StatusAccepted {
			return fmt.Errorf("publish: %d", s)
		}
		return nil
	})
}

// TestPooledReadinessMessageWhileReplicasReport checks that a pooled
// Tenant's ConfigurationLoaded says the same while its ready replicas
// take the document up one after the other (each change of it rewrote the
// status of every Connection and Grant of the Tenant not yet in force),
// names the replicas that do not serve it once it has waited
// poolWaitNamed, and names a refusing replica at once.
func TestPooledReadinessMessageWhileReplicasReport(t *testing.T) {
	readyPod := func(name string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	now := time.Now()
	scope := func(falseSince time.Time, statuses map[string]pool.Status) *poolScope {
		tn := &v1alpha1.Tenant{}
		if !falseSince.IsZero() {
			tn.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionConfigurationLoaded, Status: metav1.ConditionFalse,
				Reason: v1alpha1.ReasonConfigurationNotLoaded, LastTransitionTime: metav1.NewTime(falseSince)}}
		}
		placed := cond(v1alpha1.ConditionPoolReady, metav1.ConditionTrue, v1alpha1.ReasonPlaced, "placed")
		return &poolScope{tenant: tn, pool: &v1alpha1.BusPool{ObjectMeta: metav1.ObjectMeta{Namespace: "pools", Name: "shared"}},
			placed: &placed, configHash: "sha256:config", docHash: "sha256:doc", synced: true,
			pods: []corev1.Pod{readyPod("shared-pool-0"), readyPod("shared-pool-1"), readyPod("shared-pool-2")}, statuses: statuses}
	}
	serving := pool.Status{Hash: "sha256:doc"}
	older := pool.Status{Hash: "sha256:older"}
	var messages []string
	for _, statuses := range []map[string]pool.Status{
		{},
		{"shared-pool-1": serving},
		{"shared-pool-0": older, "shared-pool-1": serving},
		{"shared-pool-0": serving, "shared-pool-1": serving},
	} {
		s := scope(now.Add(-time.Second), statuses)
		_, loaded := s.readiness(s.loads(), now)
		if loaded.Status != metav1.ConditionFalse || loaded.Reason != v1alpha1.ReasonConfigurationNotLoaded {
			t.Fatalf("%v: %+v, want False %s", statuses, loaded, v1alpha1.ReasonConfigurationNotLoaded)
		}
		messages = append(messages, loaded.Message)
	}
	if len(slices.Compact(slices.Clone(messages))) != 1 {
		t.Errorf("the message changed as the replicas reported: %q", messages)
	}
	if m := messages[0]; !strings.Contains(m, "sha256:config") || !strings.Contains(m, "3 ready") || !strings.Contains(m, "pools/shared") {
		t.Errorf("message %q: want the configuration, the ready replicas and the pool", m)
	}

	s := scope(now.Add(-poolWaitNamed-time.Second), map[string]pool.Status{"shared-pool-0": older, "shared-pool-1": serving})
	if _, loaded := s.readiness(s.loads(), now); !strings.Contains(loaded.Message, "replica shared-pool-0 serves document sha256:older") ||
		!strings.Contains(loaded.Message, "replica shared-pool-2 does not serve the workspace yet") || strings.Contains(loaded.Message, "shared-pool-1") {
		t.Errorf("after %s: %q, want the two replicas that do not serve it named", poolWaitNamed, loaded.Message)
	}

	s = scope(now.Add(-time.Second), map[string]pool.Status{"shared-pool-0": {Hash: "sha256:older", Refused: "sha256:doc", Error: "rego_parse_error"}})
	if _, loaded := s.readiness(s.loads(), now); loaded.Reason != v1alpha1.ReasonConfigurationRefused || !strings.Contains(loaded.Message, "shared-pool-0 refused it: rego_parse_error") {
		t.Errorf("a refusal: %+v, want it named at once", loaded)
	}

	s = scope(now.Add(-time.Second), map[string]pool.Status{"shared-pool-0": serving, "shared-pool-1": serving, "shared-pool-2": serving})
	if _, loaded := s.readiness(s.loads(), now); loaded.Status != metav1.ConditionTrue {
		t.Errorf("every replica serves it: %+v", loaded)
	}
}

// TestAPooledWorkspaceIsOpenedBeforeItsFirstDocument: the operator opens
// a pooled workspace's stream on the pool's cluster, as its topic limits
// and retention say, before it puts the workspace's first document, so
// that the pool's replicas, which apply a new document all at once, find
// the stream there instead of each creating it (nats-server often answers
// none of several creates of one replicated stream). No replica serves
// this pool: whatever is on the cluster is the operator's.
func TestAPooledWorkspaceIsOpenedBeforeItsFirstDocument(t *testing.T) {
	nats, st := startPoolCluster(t)
	ns := newNamespace(t)
	ctx := context.Background()
	create(t, newBusPool(ns, "shared", nats.ClientURL()))
	waitCondition(t, ns, "shared", &v1alpha1.BusPool{}, busPoolGen, v1alpha1.ConditionClusterReady, metav1.ConditionTrue, v1alpha1.ReasonClusterConnected)
	sp, err := pool.Open(ctx, st.JS, ns+"_shared", 1)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := sp.Documents.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = docs.Stop() }()

	ws := "opened"
	month := 30 * 24 * time.Hour
	create(t, newTenant(ns, "opened", func(tn *v1alpha1.Tenant) {
		tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared"}
		tn.Spec.Capacity = &v1alpha1.TenantCapacity{Topic: &v1alpha1.TopicCapacity{MaxMessages: 5000, MaxAge: &metav1.Duration{Duration: month}}}
	}))
	create(t, newConnection(ns, "cms", "opened"))
	select {
	case e := <-docs.Updates():
		if e == nil || e.Key() != ws {
			t.Fatalf("the first document: %v", e)
		}
	case <-time.After(time.Minute):
		t.Fatal("no document of the workspace put into the pool within a minute")
	}
	// The stream was there when its document was first put.
	s, err := st.JS.Stream(ctx, store.StreamName(ws))
	if err != nil {
		t.Fatalf("the workspace's stream when its first document was put: %v", err)
	}
	if c := s.CachedInfo().Config; c.MaxMsgs != 5000 || c.MaxAge != month || c.Discard != jetstream.DiscardNew {
		t.Errorf("the stream opened as max messages %d, max age %s, discard %s; want 5000, %s and new", c.MaxMsgs, c.MaxAge, c.Discard, month)
	}
}
