package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
)

// The operator reaches every BusPool's NATS cluster itself: it writes the
// placed workspaces' documents into the pool's bucket, and reads what the
// replicas report in the pool's status bucket. poolClients keeps one
// connection per BusPool, opened on first use and replaced when the pool's
// URL, credentials or stream replicas change, and one watch of the status
// bucket per connection: what the replicas report is held in memory (one
// small entry per workspace and replica), so a Tenant's readiness costs no
// request to the cluster, and each change is sent to the controllers as an
// event, so a Tenant is Ready as soon as its replicas report it.

// poolDialTimeout bounds the connection to a pool's cluster and the
// opening of its buckets, within a reconcile.
const poolDialTimeout = 10 * time.Second

// poolWatchRetry is how long a status watch that ended waits before it
// starts again.
const poolWatchRetry = time.Second

// poolEvent says that what the replicas of pool report for workspace
// changed; an empty workspace means every workspace of the pool (the watch
// started again, or the connection changed).
type poolEvent struct {
	pool      types.NamespacedName
	workspace string
}

// poolClients holds the connections to the BusPools' clusters. It is a
// manager Runnable: the connections close when the manager stops.
type poolClients struct {
	base context.Context
	stop context.CancelFunc
	// tenantEvents and poolEvents carry every status change to the Tenant
	// pool controller and the BusPool controller.
	tenantEvents, poolEvents chan event.TypedGenericEvent[poolEvent]

	mu    sync.Mutex
	slots map[types.NamespacedName]*poolSlot
}

// poolSlot holds one pool's connection. Its lock is held while the
// connection is made, so that a pool whose cluster is slow to answer holds
// up only the reconciles of that pool.
type poolSlot struct {
	mu     sync.Mutex
	client *poolClient
}

func newPoolClients() *poolClients {
	ctx, stop := context.WithCancel(context.Background())
	return &poolClients{
		base: ctx, stop: stop,
		tenantEvents: make(chan event.TypedGenericEvent[poolEvent], 1024),
		poolEvents:   make(chan event.TypedGenericEvent[poolEvent], 1024),
		slots:        map[types.NamespacedName]*poolSlot{},
	}
}

// Start waits for the manager to stop, then closes every connection.
func (c *poolClients) Start(ctx context.Context) error {
	<-ctx.Done()
	c.stop()
	c.mu.Lock()
	slots := c.slots
	c.slots = map[types.NamespacedName]*poolSlot{}
	c.mu.Unlock()
	for _, sl := range slots {
		sl.mu.Lock()
		if sl.client != nil {
			sl.client.close()
			sl.client = nil
		}
		sl.mu.Unlock()
	}
	return nil
}

// poolClient is one BusPool's connection, its buckets and what its
// replicas report.
type poolClient struct {
	key types.NamespacedName
	// identity is what the connection was made from: URL, credentials,
	// pool name, replicas and the shared records' bound. Another identity
	// makes another connection.
	identity string
	url      string
	nc       *nats.Conn
	js       jetstream.JetStream
	pool     *pool.Pool
	// store opens a workspace's stream and records on the pool's
	// cluster as the pool's replicas do.
	store  *store.Store
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.RWMutex
	// synced is true once the watch delivered every current status.
	synced bool
	// watchErr is why the last watch ended, nil while it runs.
	watchErr error
	// statuses are what each replica reports, by workspace and replica.
	statuses map[string]map[string]pool.Status
}

// forPool returns the connection of bp, reading its NATS credentials
// Secret, opening the connection and the pool's buckets when there is
// none or bp's changed.
func (c *poolClients) forPool(ctx context.Context, secrets *Secrets, bp *v1alpha1.BusPool) (*poolClient, error) {
	var creds []byte
	if ref := bp.Spec.NATS.CredentialsSecretRef; ref != nil {
		sec := &corev1.Secret{}
		if err := secrets.Get(ctx, types.NamespacedName{Namespace: bp.Namespace, Name: ref.Name}, sec); err != nil {
			return nil, fmt.Errorf("read the NATS credentials Secret %s: %w", ref.Name, err)
		}
		if creds = sec.Data[natsCredsKey(ref)]; len(creds) == 0 {
			return nil, fmt.Errorf("the NATS credentials Secret %s has no key %s", ref.Name, natsCredsKey(ref))
		}
	}
	sum := sha256.Sum256(creds)
	identity := strings.Join([]string{bp.Spec.NATS.URL, hex.EncodeToString(sum[:]), bp.PoolName(), strconv.Itoa(int(bp.EffectiveStreamReplicas())), strconv.FormatInt(bp.SharedRecordsMaxBytes(), 10)}, "|")
	key := types.NamespacedName{Namespace: bp.Namespace, Name: bp.Name}

	sl := c.slot(key)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if pc := sl.client; pc != nil {
		if pc.identity == identity && !pc.nc.IsClosed() {
			return pc, nil
		}
		pc.close()
		sl.client = nil
	}
	pc, err := c.dial(ctx, key, identity, bp, creds)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	forgotten := c.slots[key] != sl
	c.mu.Unlock()
	if forgotten {
		// The pool went while this connection was made.
		pc.close()
		return nil, fmt.Errorf("BusPool %s is gone", key)
	}
	sl.client = pc
	return pc, nil
}

// forget closes the connection of the pool key, if any: the BusPool is
// gone.
func (c *poolClients) forget(key types.NamespacedName) {
	c.mu.Lock()
	sl := c.slots[key]
	delete(c.slots, key)
	c.mu.Unlock()
	if sl == nil {
		return
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.client != nil {
		sl.client.close()
		sl.client = nil
	}
}

// slot returns the pool key's slot, made on first use.
func (c *poolClients) slot(key types.NamespacedName) *poolSlot {
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := c.slots[key]
	if sl == nil {
		sl = &poolSlot{}
		c.slots[key] = sl
	}
	return sl
}

func (c *poolClients) dial(ctx context.Context, key types.NamespacedName, identity string, bp *v1alpha1.BusPool, creds []byte) (*poolClient, error) {
	opts := []nats.Option{
		nats.Name("storybus-operator"),
		nats.Timeout(poolDialTimeout),
		// Once connected, the connection is kept through outages: the
		// watch and the writes resume when the cluster is back.
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
	}
	if len(creds) > 0 {
		opts = append(opts, nats.UserCredentialBytes(creds))
	}
	nc, err := nats.Connect(bp.Spec.NATS.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", bp.Spec.NATS.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, poolDialTimeout)
	defer cancel()
	p, err := pool.Open(octx, js, bp.PoolName(), int(bp.EffectiveStreamReplicas()))
	if err != nil {
		nc.Close()
		return nil, err
	}
	wctx, stop := context.WithCancel(c.base)
	st := store.Over(nc, js, store.Options{Replicas: int(bp.EffectiveStreamReplicas()), SharedBuckets: true, SharedRecordsMaxBytes: bp.SharedRecordsMaxBytes()})
	pc := &poolClient{key: key, identity: identity, url: bp.Spec.NATS.URL, nc: nc, js: js, pool: p, store: st, cancel: stop, done: make(chan struct{})}
	go c.watch(wctx, pc)
	return pc, nil
}

// watch keeps pc's statuses current until ctx ends, starting the watch
// again when it ends.
func (c *poolClients) watch(ctx context.Context, pc *poolClient) {
	defer close(pc.done)
	log := ctrl.Log.WithName("pool-status").WithValues("busPool", pc.key.String())
	for ctx.Err() == nil {
		err := c.watchOnce(ctx, pc)
		if ctx.Err() != nil {
			return
		}
		pc.mu.Lock()
		pc.watchErr = err
		pc.mu.Unlock()
		log.Info("the pool's status watch ended; watching again", "error", err.Error())
		c.send(ctx, poolEvent{pool: pc.key})
		select {
		case <-ctx.Done():
		case <-time.After(poolWatchRetry):
		}
	}
}

// watchOnce watches every key of the status bucket: the current values
// first, which replace what pc holds once they are all in, then each
// change.
func (c *poolClients) watchOnce(ctx context.Context, pc *poolClient) error {
	w, err := pc.pool.Statuses.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", pool.StatusBucket(pc.pool.Name), err)
	}
	defer func() { _ = w.Stop() }()
	initial := map[string]map[string]pool.Status{}
	synced := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch was closed")
			}
			if e == nil {
				synced = true
				pc.mu.Lock()
				pc.statuses, pc.synced, pc.watchErr = initial, true, nil
				pc.mu.Unlock()
				c.send(ctx, poolEvent{pool: pc.key})
				continue
			}
			ws, replica, ok := strings.Cut(e.Key(), ".")
			if !ok {
				continue
			}
			if !synced {
				applyStatus(initial, ws, replica, e)
				continue
			}
			pc.mu.Lock()
			applyStatus(pc.statuses, ws, replica, e)
			pc.mu.Unlock()
			c.send(ctx, poolEvent{pool: pc.key, workspace: ws})
		}
	}
}

// applyStatus records entry e of the status key ws.replica in m.
func applyStatus(m map[string]map[string]pool.Status, ws, replica string, e jetstream.KeyValueEntry) {
	var st pool.Status
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &st) != nil {
		delete(m[ws], replica)
		if len(m[ws]) == 0 {
			delete(m, ws)
		}
		return
	}
	if m[ws] == nil {
		m[ws] = map[string]pool.Status{}
	}
	m[ws][replica] = st
}

// send hands ev to both controllers.
func (c *poolClients) send(ctx context.Context, ev poolEvent) {
	for _, ch := range []chan event.TypedGenericEvent[poolEvent]{c.tenantEvents, c.poolEvents} {
		select {
		case ch <- event.TypedGenericEvent[poolEvent]{Object: ev}:
		case <-ctx.Done():
			return
		}
	}
}

func (pc *poolClient) close() {
	pc.cancel()
	pc.nc.Close()
	<-pc.done
}

// statusesOf returns what every replica reports for workspace ws, by
// replica, and whether the watch has delivered the bucket's current
// values yet.
func (pc *poolClient) statusesOf(ws string) (map[string]pool.Status, bool) {
	pc.mu.RLock()
	defer pc.mu.RUnlock()
	return maps.Clone(pc.statuses[ws]), pc.synced
}

// replicaCounts is what one replica reports over every workspace.
type replicaCounts struct {
	workspaces, refused int32
}

// counts returns, by replica, how many workspaces it serves and how many
// latest documents it refused; ok is false until the watch has delivered
// the bucket's current values.
func (pc *poolClient) counts() (map[string]replicaCounts, bool) {
	pc.mu.RLock()
	defer pc.mu.RUnlock()
	out := map[string]replicaCounts{}
	for _, byReplica := range pc.statuses {
		for replica, st := range byReplica {
			n := out[replica]
			if st.Hash != "" {
				n.workspaces++
			}
			if st.Refused != "" {
				n.refused++
			}
			out[replica] = n
		}
	}
	return out, pc.synced
}

// health describes the connection: the server it is connected to, or why
// it is not.
func (pc *poolClient) health() (string, error) {
	pc.mu.RLock()
	watchErr := pc.watchErr
	pc.mu.RUnlock()
	if !pc.nc.IsConnected() {
		return "", fmt.Errorf("not connected to %s (%s)", pc.url, pc.nc.Status())
	}
	if watchErr != nil {
		return "", fmt.Errorf("the watch of %s failed: %w", pool.StatusBucket(pc.pool.Name), watchErr)
	}
	msg := "connected to " + pc.nc.ConnectedUrlRedacted()
	if name := pc.nc.ConnectedClusterName(); name != "" {
		msg += " (cluster " + name + ")"
	}
	return msg + fmt.Sprintf("; buckets %s and %s open", pool.Bucket(pc.pool.Name), pool.StatusBucket(pc.pool.Name)), nil
}
