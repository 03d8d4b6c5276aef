package bus

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/bus/tlsconfig"
)

// RunOptions say how Run starts a bus: its store and its workspaces.
type RunOptions struct {
	// DataDir is the embedded store's JetStream directory, locked while
	// the bus runs; ignored with NATSURL.
	DataDir string
	// SyncAlways, SyncInterval and NATSListen configure the embedded
	// store (store.EmbeddedOptions).
	SyncAlways   bool
	SyncInterval time.Duration
	NATSListen   string
	// NATSURL is an external NATS cluster; empty runs JetStream embedded.
	NATSURL string
	// NATSCredentials is the credentials file for NATSURL.
	NATSCredentials string
	// Replicas of every stream and bucket the bus creates.
	Replicas int
	// SharedBuckets keeps workspaces' records and limit counters in the
	// buckets a cluster's pooled workspaces share (store.Options): a pool
	// replica's store.
	SharedBuckets bool
	// SharedRecordsMaxBytes bounds each shared records bucket
	// (store.Options); 0 asks for no bound.
	SharedRecordsMaxBytes int64
	// Bus configures the server; Run sets its Store and SoleWriter.
	Bus Options
	// Workspaces are applied before serve is called.
	Workspaces []*config.Workspace
}

// Run runs a bus until serve returns: it locks the embedded store's data
// directory, starts or connects to the store, decides whether the bus is
// its store's only writer, applies the workspaces, and calls serve with
// the server (serve listens, and returns when ctx ends or its listeners
// fail). Then it waits for the requests in progress, and stops the
// embedded store, marking a clean stop when no record can be missing.
// serve, dev, the tests and pool replicas all start a bus this way.
func Run(ctx context.Context, o RunOptions, serve func(ctx context.Context, srv *Server) error) error {
	log := cmp.Or(o.Bus.Logger, slog.Default())
	var ns *server.Server
	// cleanStart: the store was stopped cleanly, every record flushed, and
	// the start rebuilds none from the topic. markClean: this run may leave
	// the mark when it stops, because no record can be missing: it started
	// clean, or it rebuilt the records of every workspace in the store.
	cleanStart, markClean := false, false
	if o.NATSURL == "" {
		lock, err := store.LockDataDir(o.DataDir)
		if err != nil {
			return err
		}
		defer lock.Close()
		// The mark is taken now, so a crash of this run, or a start that
		// fails before it rebuilt every workspace's records, is never
		// mistaken for a clean stop.
		if cleanStart, err = store.TakeCleanStop(o.DataDir); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		markClean = cleanStart
		started := time.Now()
		ns, err = store.StartEmbedded(store.EmbeddedOptions{
			DataDir:      o.DataDir,
			SyncAlways:   o.SyncAlways,
			SyncInterval: o.SyncInterval,
			Listen:       o.NATSListen,
		})
		if err != nil {
			return err
		}
		// After a crash the server recovers its streams from their files
		// first: most of this time, and none of the bus's.
		log.Info("embedded store started", "cleanStart", cleanStart, "took", time.Since(started).Round(time.Millisecond).String())
		if o.NATSListen != "" {
			// Whoever reaches it may read and write every workspace's
			// stream and records: the embedded server asks for no
			// credentials (docs/consumers.md).
			log.Warn("embedded NATS serves clients without authentication", "nats", ns.ClientURL())
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
			if !markClean {
				return
			}
			if err := store.MarkCleanStop(o.DataDir); err != nil {
				log.Warn("could not mark the store's clean stop; the next start rebuilds records from the topic", "error", err)
			}
		}()
	}
	st, err := store.Connect(store.Options{URL: o.NATSURL, Embedded: ns, CredentialsFile: o.NATSCredentials, Replicas: o.Replicas, Name: "storybus-bus", CleanStart: cleanStart, SharedBuckets: o.SharedBuckets, SharedRecordsMaxBytes: o.SharedRecordsMaxBytes})
	if err != nil {
		return err
	}
	defer st.Close()

	bo := o.Bus
	bo.Store = st
	// The embedded store's only writer is this process (its data directory
	// is locked) unless it also serves NATS clients.
	bo.SoleWriter = ns != nil && o.NATSListen == ""
	srv := New(bo)
	// A store request has a short default deadline, and an embedded store
	// recovering from a crash on a busy node can answer slower than that:
	// the start gives the store longer before it gives up.
	startCtx, cancelStart := context.WithTimeout(ctx, StartTimeout)
	defer cancelStart()
	for _, cfg := range o.Workspaces {
		if err := srv.Apply(startCtx, cfg); err != nil {
			return err
		}
	}
	cancelStart()
	err = serve(ctx, srv)
	srv.Wait()
	if ns != nil && !cleanStart {
		waitCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		markClean = everyWorkspaceServed(waitCtx, st, srv, log)
	}
	return err
}

// StartTimeout bounds how long Run waits for the store to open the
// workspaces it starts with.
const StartTimeout = 2 * time.Minute

// SoleWriter reports whether the bus is its store's only writer, as Run
// decided.
func (s *Server) SoleWriter() bool { return s.opts.SoleWriter }

// everyWorkspaceServed reports whether every workspace whose topic is in
// the store was served by this run, so had its records rebuilt when it
// was applied. A workspace the configuration left out keeps its need of a
// rebuild: no clean stop is marked until a run serves it.
func everyWorkspaceServed(ctx context.Context, st *store.Store, srv *Server, log *slog.Logger) bool {
	names := st.JS.StreamNames(ctx)
	var missing []string
	for name := range names.Name() {
		if ws, ok := strings.CutPrefix(name, store.StreamName("")); ok {
			if _, served := srv.Config(ws); !served {
				missing = append(missing, ws)
			}
		}
	}
	if err := names.Err(); err != nil {
		log.Warn("could not list the store's workspaces; the next start rebuilds records from the topic", "error", err)
		return false
	}
	if len(missing) > 0 {
		log.Warn("workspaces in the store were not served; the next start rebuilds records from the topic", "workspaces", missing)
		return false
	}
	return true
}

// Hosts is where the workspaces' own key pairs are presented; nil on a
// bus serving plain HTTP.
func (s *Server) Hosts() *tlsconfig.Hosts { return s.opts.Hosts }

// Store is the store the bus serves from.
func (s *Server) Store() *store.Store { return s.opts.Store }

// Drain marks the bus as stopping: from now on /readyz answers 503, so
// load balancers and Service endpoints stop sending it new requests, while
// it goes on answering those that still arrive.
func (s *Server) Drain() { s.draining.Store(true) }

// Remove stops serving workspace id: from now on its requests are answered
// as those of a workspace the bus does not serve, and Remove returns once
// the workspace's background writes (record marks, counters) are done.
// Its stream and buckets stay in the store.
func (s *Server) Remove(_ context.Context, id string) {
	l := s.applyLock(id)
	l.Lock()
	defer l.Unlock()
	s.mu.Lock()
	current := *s.workspaces.Load()
	ws, ok := current[id]
	if !ok {
		s.mu.Unlock()
		return
	}
	next := maps.Clone(current)
	delete(next, id)
	s.workspaces.Store(&next)
	s.mu.Unlock()
	if s.opts.Hosts != nil {
		s.opts.Hosts.Remove(id)
	}
	ws.core.Wait()
	ws.limiter.Wait()
	s.log.Info("stopped serving workspace", "workspace", id)
}
