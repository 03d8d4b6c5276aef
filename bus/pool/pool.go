// Package pool carries a bus pool's workspaces to its replicas through the
// pool's own NATS cluster, so that adding, changing or removing a
// workspace restarts no replica and needs no Kubernetes object per
// workspace on the replicas' side.
//
// Two JetStream key-value buckets make a pool: storybus-pool-<name> holds
// one key per workspace, its compiled configuration document (the one
// serve reads from a file, signing key inline), written by the operator;
// storybus-pool-<name>-status holds one key per workspace and replica,
// <workspace>.<replica>, what that replica has in force: the document's
// hash, or why it refused it. A replica watches every key of the first
// bucket: on start and on every reconnect the watch delivers the current
// value of each key first, so a replica converges to the current set, and
// each change costs it one document, whatever the number of workspaces.
package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/store"
)

// Bucket is the key-value bucket of pool name's workspace documents.
func Bucket(name string) string { return "storybus-pool-" + name }

// StatusBucket is the key-value bucket where pool name's replicas report
// what they have in force.
func StatusBucket(name string) string { return "storybus-pool-" + name + "-status" }

// MaxDocumentBytes bounds one workspace's document: a workspace of 1,000
// connections with long names fits well within it, and it is the NATS
// server's default maximum message size.
const MaxDocumentBytes = 1 << 20

// Status is what one replica has in force for one workspace.
type Status struct {
	// Hash is config.DocumentHash of the document in force, empty when the
	// replica refused the document and serves none of the workspace.
	Hash string `json:"hash,omitempty"`
	// Refused is the hash of a document the replica refused, and Error
	// why; the document before it, if any, stays in force. A document
	// that failed in the store is reported so too until it applies: the
	// replica applies it again.
	Refused string `json:"refused,omitempty"`
	Error   string `json:"error,omitempty"`
	// At is when the replica wrote this status.
	At time.Time `json:"at"`
}

// Pool is a pool's two buckets.
type Pool struct {
	// Name is the pool's name.
	Name string
	// Documents holds one compiled workspace document per key.
	Documents jetstream.KeyValue
	// Statuses holds one Status per workspace and replica.
	Statuses jetstream.KeyValue
}

// Open opens pool name's buckets, creating them with replicas copies each
// when they do not exist.
func Open(ctx context.Context, js jetstream.JetStream, name string, replicas int) (*Pool, error) {
	if replicas < 1 {
		replicas = 1
	}
	docs, err := store.CreateOrUpdate(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:       Bucket(name),
			Description:  "storybus pool " + name + ": one compiled workspace configuration per key",
			History:      1,
			MaxValueSize: MaxDocumentBytes,
			Storage:      jetstream.FileStorage,
			Replicas:     replicas,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("pool %s's documents bucket: %w", name, err)
	}
	statuses, err := store.CreateOrUpdate(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      StatusBucket(name),
			Description: "storybus pool " + name + ": what each replica has in force, per workspace",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("pool %s's status bucket: %w", name, err)
	}
	return &Pool{Name: name, Documents: docs, Statuses: statuses}, nil
}

// Put writes workspace cfg's document into the pool: every replica puts it
// in force. It returns the document's hash, which the replicas report.
func (p *Pool) Put(ctx context.Context, cfg *config.Workspace) (string, error) {
	if err := cfg.Validate(); err != nil {
		return "", fmt.Errorf("workspace %q: %w", cfg.ID, err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	if len(b) > MaxDocumentBytes {
		return "", fmt.Errorf("workspace %q: its document is %d bytes, over %d", cfg.ID, len(b), MaxDocumentBytes)
	}
	if _, err := p.Documents.Put(ctx, cfg.ID, b); err != nil {
		return "", fmt.Errorf("put workspace %q into pool %s: %w", cfg.ID, p.Name, err)
	}
	return config.DocumentHash(b), nil
}

// Delete removes workspace id from the pool: every replica stops serving
// it. Its stream and buckets stay; the operator deletes them as the
// Tenant's deletion policy says.
func (p *Pool) Delete(ctx context.Context, id string) error {
	if err := p.Documents.Delete(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete workspace %q from pool %s: %w", id, p.Name, err)
	}
	return nil
}

// StatusesOf returns what every replica reports for workspace id, by
// replica.
func (p *Pool) StatusesOf(ctx context.Context, id string) (map[string]Status, error) {
	lister, err := p.Statuses.ListKeysFiltered(ctx, id+".*")
	if err != nil {
		return nil, err
	}
	out := map[string]Status{}
	for key := range lister.Keys() {
		e, err := p.Statuses.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var st Status
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			continue
		}
		out[strings.TrimPrefix(key, id+".")] = st
	}
	return out, nil
}

// Target is what a replica does with the pool's workspaces: a bus server.
// An Apply failure marked store.ErrUnavailable is the store's, not the
// document's: Serve applies the document again later.
type Target interface {
	Apply(ctx context.Context, cfg *config.Workspace) error
	Remove(ctx context.Context, id string)
}

// The waits before a document whose Apply failed in the store is applied
// again: doubled after each failure, from the first to the longest.
const (
	firstRetryWait = time.Second
	maxRetryWait   = 30 * time.Second
)

// applyConcurrency bounds the documents a replica applies at once: each
// workspace's opening waits mostly on the cluster's answers (its stream
// created on every node), so the pool's current set at the start, and a
// burst of Tenants placed at once after it, are applied in a fraction of
// the time one at a time would take.
const applyConcurrency = 16

// Serve keeps target serving the pool's workspaces until ctx ends:
// every document in the pool, then every change, applied as it comes.
// Documents are applied applyConcurrency at a time, never two of one
// workspace at once: the pool's current set at the start (one per
// workspace), then each batch of changes waiting (the newest of each
// workspace, latest), one batch after the other, so that a workspace's
// changes are applied in order. A document that does not parse or apply
// is reported in the status bucket under this replica's name and leaves
// the workspace as it was; the other workspaces are not touched. One that
// failed in the store (a stream the cluster did not create in time, the
// cluster out of reach) is applied again later, until it applies or the
// pool holds another document for the workspace. synced, when set, is
// called once the documents the pool held at the start have been applied
// once.
func (p *Pool) Serve(ctx context.Context, replica string, target Target, log *slog.Logger, synced func()) error {
	w, err := p.Documents.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch pool %s: %w", p.Name, err)
	}
	defer func() { _ = w.Stop() }()
	// again holds the documents to apply again, by workspace, once retry
	// fires.
	again := map[string]jetstream.KeyValueEntry{}
	var retry <-chan time.Time
	wait := firstRetryWait
	applyAgainLater := func(es []jetstream.KeyValueEntry) {
		for _, e := range es {
			again[e.Key()] = e
		}
		if len(again) > 0 && retry == nil {
			wait = firstRetryWait
			retry = time.After(wait)
		}
	}
	// opening applies the current set until the watch says it has all
	// been delivered: no two of its documents are one workspace's.
	opening := newApplyBatch(applyConcurrency)
	defer func() {
		// No document of the current set is still being applied when
		// Serve returns, and is started again.
		if opening != nil {
			opening.wait()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-retry:
			for id, e := range again {
				if !p.handle(ctx, replica, target, e, log) {
					delete(again, id)
				}
			}
			retry = nil
			if len(again) > 0 {
				wait = min(2*wait, maxRetryWait)
				retry = time.After(wait)
			}
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("pool %s's watch ended", p.Name)
			}
			batch, end, closed := latest(e, w.Updates())
			changes := opening
			if changes == nil {
				changes = newApplyBatch(applyConcurrency)
			}
			for _, e := range batch {
				// A newer document, or the workspace's removal, replaces
				// one waiting to be applied again.
				delete(again, e.Key())
				changes.apply(func() bool { return p.handle(ctx, replica, target, e, log) }, e)
			}
			if changes != opening {
				applyAgainLater(changes.wait())
			}
			if end && opening != nil {
				applyAgainLater(opening.wait())
				opening = nil
			}
			if end && synced != nil {
				// The current values have all been delivered.
				synced()
				synced = nil
			}
			if closed {
				return fmt.Errorf("pool %s's watch ended", p.Name)
			}
		}
	}
}

// maxGathered bounds the changes latest takes at once.
const maxGathered = 1024

// latest returns, of e and the changes already waiting behind it in
// updates (at most maxGathered), the last of each workspace, in the order
// their workspaces first came: a replica busy applying documents, as when
// hundreds of Tenants are placed at once and each is compiled again as
// its Connections' Secrets arrive, then applies each workspace's newest
// document once, not every one it was sent meanwhile (each a few round
// trips to the cluster). It stops at the end of the current values (a nil
// entry), reported by end, and at the end of the watch, reported by
// closed.
func latest(e jetstream.KeyValueEntry, updates <-chan jetstream.KeyValueEntry) (batch []jetstream.KeyValueEntry, end, closed bool) {
	if e == nil {
		return nil, true, false
	}
	at := map[string]int{e.Key(): 0}
	batch = []jetstream.KeyValueEntry{e}
	for n := 1; n < maxGathered; n++ {
		select {
		case next, ok := <-updates:
			switch {
			case !ok:
				return batch, false, true
			case next == nil:
				return batch, true, false
			}
			if i, seen := at[next.Key()]; seen {
				batch[i] = next
				continue
			}
			at[next.Key()] = len(batch)
			batch = append(batch, next)
		default:
			return batch, false, false
		}
	}
	return batch, false, false
}

// applyBatch applies documents of distinct workspaces, a bounded number
// at once.
type applyBatch struct {
	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	again []jetstream.KeyValueEntry
}

func newApplyBatch(n int) *applyBatch { return &applyBatch{slots: make(chan struct{}, n)} }

// apply runs handle, which reports whether e is to be applied again, once
// a slot is free.
func (b *applyBatch) apply(handle func() bool, e jetstream.KeyValueEntry) {
	b.slots <- struct{}{}
	b.wg.Go(func() {
		defer func() { <-b.slots }()
		if handle() {
			b.mu.Lock()
			b.again = append(b.again, e)
			b.mu.Unlock()
		}
	})
}

// wait waits for every document to be applied, and returns those to apply
// again.
func (b *applyBatch) wait() []jetstream.KeyValueEntry {
	b.wg.Wait()
	return b.again
}

// handle applies one change of the pool and reports what it did in the
// status bucket. It reports whether the change is to be applied again:
// its Apply failed in the store.
func (p *Pool) handle(ctx context.Context, replica string, target Target, e jetstream.KeyValueEntry, log *slog.Logger) (again bool) {
	id := e.Key()
	statusKey := id + "." + replica
	if e.Operation() != jetstream.KeyValuePut {
		target.Remove(ctx, id)
		if err := p.Statuses.Delete(ctx, statusKey); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			log.Warn("could not clear a removed workspace's status", "pool", p.Name, "workspace", id, "error", err)
		}
		log.Info("pool workspace removed", "pool", p.Name, "workspace", id)
		return false
	}
	hash := config.DocumentHash(e.Value())
	cfg, err := config.Parse(e.Value())
	if err == nil && cfg.ID != id {
		err = fmt.Errorf("the document of key %q is workspace %q's", id, cfg.ID)
	}
	if err == nil {
		err = target.Apply(ctx, cfg)
	}
	again = errors.Is(err, store.ErrUnavailable)
	st := Status{At: time.Now().UTC()}
	switch {
	case again:
		log.Error("pool workspace not applied: the store failed; applying it again later", "pool", p.Name, "workspace", id, "error", err)
	case err != nil:
		log.Error("pool workspace refused; the previous configuration stays in force", "pool", p.Name, "workspace", id, "error", err)
	}
	if err != nil {
		if prev, ok := p.status(ctx, statusKey); ok {
			st.Hash = prev.Hash
		}
		st.Refused, st.Error = hash, err.Error()
	} else {
		st.Hash = hash
	}
	b, _ := json.Marshal(st)
	if _, err := p.Statuses.Put(ctx, statusKey, b); err != nil {
		log.Warn("could not report a workspace's status", "pool", p.Name, "workspace", id, "error", err)
	}
	return again
}

func (p *Pool) status(ctx context.Context, key string) (Status, bool) {
	e, err := p.Statuses.Get(ctx, key)
	if err != nil {
		return Status{}, false
	}
	var st Status
	if json.Unmarshal(e.Value(), &st) != nil {
		return Status{}, false
	}
	return st, true
}
