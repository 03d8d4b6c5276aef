// Package store holds the bus's state on NATS JetStream: an embedded
// nats-server for one replica, or a connection to an external NATS cluster,
// and per workspace a records key-value bucket and a stream that is the
// workspace's topic.
package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	config "github.com/storybus/storybus/api/config/v1alpha1"
)

// RecordsSyncInterval is the embedded store's periodic fsync under
// SyncAlways when no SyncInterval is given: the records bucket, flushed
// asynchronously, is fsynced this often.
const RecordsSyncInterval = 10 * time.Second

// DuplicateWindow is how long the topic drops a re-publication of the same
// message_id (Nats-Msg-Id).
const DuplicateWindow = 5 * time.Minute

// EmbeddedOptions configure the nats-server embedded in the bus process.
type EmbeddedOptions struct {
	// DataDir holds JetStream's file storage.
	DataDir string
	// SyncAlways fsyncs every write before it is acknowledged. When false,
	// JetStream fsyncs every SyncInterval (nats-server's default is 2m).
	SyncAlways bool
	// SyncInterval is the fsync period when SyncAlways is false.
	SyncInterval time.Duration
	// Listen, when set ("127.0.0.1:4222"), also serves NATS clients such as
	// consumers; otherwise the server takes in-process connections only.
	Listen string
}

// StartEmbedded starts a JetStream-enabled nats-server in this process and
// waits until it accepts connections.
func StartEmbedded(o EmbeddedOptions) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "storybus",
		JetStream:  true,
		StoreDir:   o.DataDir,
		SyncAlways: o.SyncAlways,
		NoSigs:     true,
		NoLog:      true,
	}
	if o.SyncInterval > 0 {
		opts.SyncInterval = o.SyncInterval
	} else if o.SyncAlways {
		// Under always, only the asynchronously persisted records bucket
		// waits for the periodic fsync; a short period keeps short the
		// window of records a power loss can take, and with it the topic a
		// start reads to rebuild them.
		opts.SyncInterval = RecordsSyncInterval
	}
	if o.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("nats listen address: %w", err)
		}
		opts.Host = host
		if opts.Port, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("nats listen port: %w", err)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats-server did not become ready in 30s")
	}
	return ns, nil
}

// Options say where the store is.
type Options struct {
	// URL of an external NATS cluster; ignored when Embedded is set.
	URL string
	// Embedded is an in-process server to connect to without a socket.
	Embedded *server.Server
	// CredentialsFile is a NATS credentials file for the external cluster.
	CredentialsFile string
	// Replicas of every stream and bucket: 1 embedded, 3 on a cluster.
	Replicas int
	// Name names the connection in the server's monitoring.
	Name string
	// CleanStart says that the embedded store was last stopped cleanly
	// (TakeCleanStop): no record can have been lost, and none is rebuilt.
	CleanStart bool
	// SharedBuckets keeps a new workspace's records and limit counters as
	// keys of buckets the cluster's pooled workspaces share
	// (SharedRecordsBucket, SharedLimitsBucket), so that a workspace is one
	// stream, its topic, not three: a pool's replicas set it. A workspace
	// whose records bucket of its own exists keeps it.
	SharedBuckets bool
	// SharedRecordsMaxBytes bounds each shared records bucket
	// (SharedBuckets): a full one refuses new records, IsFull says so,
	// and keeps those it holds. A bucket keeps the largest bound asked
	// for; 0 asks for none and leaves a bucket's bound as it is.
	SharedRecordsMaxBytes int64
}

// Store is a connection to JetStream.
type Store struct {
	Conn *nats.Conn
	JS   jetstream.JetStream
	// Watch follows the losses of Conn: an operation on it watches it
	// (ConnWatch.OnLoss) to fail when its answer is lost.
	Watch    *ConnWatch
	replicas int
	// recordsLossWindow is how long before a crash the records of an
	// embedded store may not be on disk yet, 0 on an external cluster: see
	// Workspace.RecordsLossWindow.
	recordsLossWindow time.Duration
	// cleanStart: see Options.CleanStart.
	cleanStart bool
	// sharedBuckets: see Options.SharedBuckets.
	sharedBuckets bool
	// sharedRecordsMaxBytes: see Options.SharedRecordsMaxBytes.
	sharedRecordsMaxBytes int64
	// sharedRecords holds the names of the shared records buckets opened,
	// for SharedRecordsUsage.
	sharedRecords sync.Map
}

// BucketUsage is how much of a bucket is used, as its stream counts it.
type BucketUsage struct {
	Bucket string
	// Bytes is what the bucket holds.
	Bytes uint64
	// MaxBytes is its bound in force, which may be another store's
	// (Options.SharedRecordsMaxBytes); 0 when it has none.
	MaxBytes int64
}

// SharedRecordsUsage reads the use and the bound in force of every shared
// records bucket the store has opened, by name; a bucket removed since is
// left out.
func (s *Store) SharedRecordsUsage(ctx context.Context) ([]BucketUsage, error) {
	var names []string
	s.sharedRecords.Range(func(k, _ any) bool {
		names = append(names, k.(string))
		return true
	})
	slices.Sort(names)
	usage := make([]BucketUsage, 0, len(names))
	for _, name := range names {
		stream, err := s.JS.Stream(ctx, "KV_"+name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return usage, err
		}
		info := stream.CachedInfo()
		usage = append(usage, BucketUsage{Bucket: name, Bytes: info.State.Bytes, MaxBytes: max(info.Config.MaxBytes, 0)})
	}
	return usage, nil
}

// lossMargin widens the window of records a crash may have lost, for the
// flush of the records bucket in progress when the process stopped.
const lossMargin = 10 * time.Second

// Connect connects to the embedded server or the external cluster.
func Connect(o Options) (*Store, error) {
	watch := newConnWatch()
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.RetryOnFailedConnect(false),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { watch.lost() }),
	}
	url := o.URL
	if o.Embedded != nil {
		opts = append(opts, nats.InProcessServer(o.Embedded))
		url = ""
	}
	if o.CredentialsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredentialsFile))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	replicas := o.Replicas
	if replicas < 1 {
		replicas = 1
	}
	st := &Store{Conn: nc, JS: js, Watch: watch, replicas: replicas, cleanStart: o.CleanStart, sharedBuckets: o.SharedBuckets && o.Embedded == nil, sharedRecordsMaxBytes: o.SharedRecordsMaxBytes}
	if o.Embedded != nil {
		// The embedded server lives and dies with this process, so this
		// process can rebuild, at its start, the records a crash lost.
		// Records are then written without an fsync of their own: see
		// OpenWorkspace.
		interval := 2 * time.Minute // nats-server's default
		if c := o.Embedded.JetStreamConfig(); c != nil && c.SyncInterval > 0 {
			interval = c.SyncInterval
		}
		st.recordsLossWindow = interval + lossMargin
	}
	return st, nil
}

// Over is a Store on a connection its caller made and keeps (the
// operator's to a pool's cluster), which opens and deletes workspaces as
// one from Connect with o's Replicas, SharedBuckets and
// SharedRecordsMaxBytes does; o's other
// fields are not read. It has no Watch: its operations wait for their
// answers until their deadlines, a lost connection or not. Closing the
// connection is the caller's: Over's Store is never closed.
func Over(nc *nats.Conn, js jetstream.JetStream, o Options) *Store {
	return &Store{Conn: nc, JS: js, replicas: max(o.Replicas, 1), sharedBuckets: o.SharedBuckets, sharedRecordsMaxBytes: o.SharedRecordsMaxBytes}
}

// OpenConfigured opens workspace cfg's stream and records (OpenWorkspace)
// as cfg says: its idempotency window, its topic's limits, and its topic's
// retention, busDefault when cfg sets none (TopicLimits.Retention). A bus
// serving cfg and the operator placing it on a pool open them alike.
func (s *Store) OpenConfigured(ctx context.Context, cfg *config.Workspace, busDefault time.Duration) (*Workspace, error) {
	limits := TopicLimits{MaxBytes: cfg.Topic.Bytes(), MaxMsgs: cfg.Topic.MaxMessages}
	return s.OpenWorkspace(ctx, cfg.ID, cfg.IdempotencyWindow.Duration, cfg.Topic.Retention(busDefault), WithTopicLimits(limits))
}

// Close drains and closes the connection.
func (s *Store) Close() {
	if s.Conn != nil {
		_ = s.Conn.Drain()
		s.Conn.Close()
	}
}

// Ping reports whether JetStream answers.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.JS.AccountInfo(ctx)
	return err
}

// WorkspaceOption changes how OpenWorkspace creates a workspace's store.
type WorkspaceOption func(*workspaceOptions)

type workspaceOptions struct {
	durableRecords bool
	topic          TopicLimits
}

// TopicLimits bound a workspace's topic stream: the stream's MaxBytes and
// MaxMsgs. Zero leaves either unbounded (up to the store's and its
// account's limits).
type TopicLimits struct {
	MaxBytes int64
	MaxMsgs  int64
}

// WithTopicLimits sets the topic's limits; OpenWorkspace without it
// leaves the topic unbounded. The topic discards new messages at a limit,
// never old ones: a publish over it is refused (IsFull) and every
// message it holds stays until its retention ends. A limit lowered under
// what the topic holds removes nothing either: publishes are refused
// until retention brings it under.
func WithTopicLimits(l TopicLimits) WorkspaceOption {
	return func(o *workspaceOptions) { o.topic = l }
}

// limit is a stream limit as JetStream reads one: -1 for none.
func limit(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// DurableRecords creates the records bucket with the store's default
// persistence even on the embedded store, so that every record is a
// durable write of its own: the benchmark's baselines that write a record
// the way a naive front would.
func DurableRecords() WorkspaceOption {
	return func(o *workspaceOptions) { o.durableRecords = true }
}

// Workspace is one workspace's slice of the store.
type Workspace struct {
	ID string
	// Stream is the workspace's topic; story heads are its per-story subjects.
	Stream jetstream.Stream
	// Records is the idempotency record bucket: the workspace's own, or
	// its keys of a shared one (Options.SharedBuckets).
	Records jetstream.KeyValue
	// RecordsBucket names the bucket Records is, or is part of.
	RecordsBucket string
	// RecordsStream is the stream behind Records, which a start reads
	// in order to rebuild the records a crash lost (publish.Core.Recover).
	RecordsStream jetstream.Stream
	// RecordsSubjects begins the subject of each of the workspace's
	// records in RecordsStream ("$KV.<bucket>." and, in a shared bucket,
	// the workspace's key prefix).
	RecordsSubjects string
	// StreamLeader and RecordsLeader read the topic and the records from
	// their streams' leaders, which Stream and Records, reading with
	// direct gets, may be behind: to confirm a compare-and-swap that
	// failed (leader.go).
	StreamLeader  Leader
	RecordsLeader KVLeader
	// Watch follows the losses of the store connection (Store.Watch).
	Watch *ConnWatch
	// RecordsLossWindow is 0 when a record is on disk (under the store's
	// fsync policy) before its write is acknowledged, or when the embedded
	// store was last stopped cleanly, its records all flushed. Otherwise the
	// records bucket is flushed asynchronously, and a crash of the process
	// can lose the records written in about this long before it; the
	// topic, written as before, is then the truth they are rebuilt from
	// (publish.Core.Recover).
	RecordsLossWindow time.Duration
	// removalsExpire is set when the records bucket allows message TTLs:
	// a removed record's marker then expires after RemovedRecordTTL
	// (RemoveRecord).
	removalsExpire bool
}

// RemovedRecordTTL is how long the marker of a removed record stays in a
// records bucket that allows message TTLs, instead of the whole window:
// nats-server's shortest message TTL. A record is removed when its message
// was not published (the topic full, a definite failure, a contention),
// and its marker would otherwise hold a shared bucket's room under its
// bound (Options.SharedRecordsMaxBytes) for the window, for a message
// never accepted.
const RemovedRecordTTL = time.Second

// RemoveRecord removes the record of key, guarded by its revision rev.
// Where the bucket allows message TTLs, it is purged with a marker that
// expires after RemovedRecordTTL; elsewhere (a bucket a server before
// 2.11 made) it is deleted, and the marker stays for the window. Either
// way a read finds no record, and a create of the key succeeds.
func (w *Workspace) RemoveRecord(ctx context.Context, key string, rev uint64) error {
	if w.removalsExpire {
		return w.Records.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(RemovedRecordTTL))
	}
	return w.Records.Delete(ctx, key, jetstream.LastRevision(rev))
}

// Replicas returns how many copies the store keeps of each stream and
// bucket it creates.
func (s *Store) Replicas() int { return s.replicas }

// SharedBuckets reports whether new workspaces keep their records and
// limit counters in shared buckets (Options.SharedBuckets).
func (s *Store) SharedBuckets() bool { return s.sharedBuckets }

// StreamName returns the name of a workspace's topic stream.
func StreamName(workspace string) string { return "som-" + workspace }

// RecordsBucket returns the name of a workspace's records bucket.
func RecordsBucket(workspace string) string { return "records-" + workspace }

// Subject returns the subject a message of the family is published on.
// The key (a story or asset id) is encoded, since ids may hold '.'.
func Subject(workspace, family, key string) string {
	return "som." + workspace + "." + family + "." + EncodeToken(key)
}

// EncodeToken encodes an id into characters valid in a NATS subject token
// and a KV key (unpadded base64url).
func EncodeToken(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// OpenWorkspace creates or updates the workspace's stream and records
// bucket. Records live for window (never less than 7 days), the topic keeps
// messages for retention (0: until the store's limits) and holds at most
// its WithTopicLimits. Each call updates a stream that exists to the
// configuration given, so that a changed limit is in force once the call
// returns.
func (s *Store) OpenWorkspace(ctx context.Context, workspace string, window, retention time.Duration, opts ...WorkspaceOption) (*Workspace, error) {
	var o workspaceOptions
	for _, opt := range opts {
		opt(&o)
	}
	topic := jetstream.StreamConfig{
		Name:        StreamName(workspace),
		Description: "storybus topic of workspace " + workspace,
		Subjects:    []string{"som." + workspace + ".>"},
		Retention:   jetstream.LimitsPolicy,
		// Discard new, never old: at a limit the publish is refused and
		// the producer told, where discarding old would silently evict a
		// message that was accepted (docs/pools.md, "Per-workspace limits").
		Discard:     jetstream.DiscardNew,
		MaxBytes:    limit(o.topic.MaxBytes),
		MaxMsgs:     limit(o.topic.MaxMsgs),
		Storage:     jetstream.FileStorage,
		Replicas:    s.replicas,
		Duplicates:  DuplicateWindow,
		MaxAge:      retention,
		AllowDirect: true,
	}
	// The topic and the records are opened at once: on a cluster each new
	// stream is a proposal the meta leader and the stream's peers agree
	// on, and a workspace new to a pool's replica waited for one after
	// the other.
	var (
		stream  jetstream.Stream
		records records
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		stream, err = CreateOrUpdate(gctx, func(ctx context.Context) (jetstream.Stream, error) {
			return openStream(ctx, s.JS, topic)
		})
		if err != nil {
			return fmt.Errorf("topic stream of %s: %w", workspace, err)
		}
		return nil
	})
	g.Go(func() (err error) {
		records, err = s.openRecords(gctx, workspace, window, o.durableRecords)
		if err != nil {
			return fmt.Errorf("records bucket of %s: %w", workspace, err)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if s.replicas > 1 {
		answersDirectGets(ctx, workspace, stream, records.kv)
	}
	return &Workspace{
		ID: workspace, Stream: stream,
		Records: records.kv, RecordsBucket: records.bucket, RecordsStream: records.stream, RecordsSubjects: records.subjects,
		RecordsLossWindow: records.lossWindow,
		StreamLeader:      NewLeader(s.JS, StreamName(workspace)), RecordsLeader: records.leader,
		Watch:          s.Watch,
		removalsExpire: records.stream.CachedInfo().Config.AllowMsgTTL,
	}, nil
}

// records is a workspace's records bucket, opened.
type records struct {
	kv         jetstream.KeyValue
	bucket     string
	stream     jetstream.Stream
	subjects   string
	leader     KVLeader
	lossWindow time.Duration
}

// directGetsWithin bounds the wait for a new replicated stream's direct
// gets.
const directGetsWithin = 5 * time.Second

// answersDirectGets waits, at most directGetsWithin, until the topic and
// the records bucket answer direct gets. A replicated stream just created
// is acknowledged before its replicas listen for them, and a read in
// between finds no responder: the workspace's first publish would be
// answered 503 registry.unavailable. Any answer will do (the probes read
// keys that do not exist); an error other than no responders, or the
// wait running out, leaves it to the reads themselves.
func answersDirectGets(ctx context.Context, workspace string, topic jetstream.Stream, records jetstream.KeyValue) {
	ctx, cancel := context.WithTimeout(ctx, directGetsWithin)
	defer cancel()
	awaitResponder(ctx, func(ctx context.Context) error {
		_, err := topic.GetLastMsgForSubject(ctx, "som."+workspace+".probe.direct-get")
		return err
	})
	awaitResponder(ctx, probeBucket(records))
}

// AwaitBucket waits, as OpenWorkspace does for a workspace's streams,
// until a replicated bucket just opened answers direct gets.
func AwaitBucket(ctx context.Context, kv jetstream.KeyValue) {
	ctx, cancel := context.WithTimeout(ctx, directGetsWithin)
	defer cancel()
	awaitResponder(ctx, probeBucket(kv))
}

// probeBucket reads a key of kv that does not exist.
func probeBucket(kv jetstream.KeyValue) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := kv.Get(ctx, "probe-direct-get")
		return err
	}
}

// awaitResponder reads again, after a growing pause, while read finds no
// responder and ctx lasts.
func awaitResponder(ctx context.Context, read func(context.Context) error) {
	for wait := 10 * time.Millisecond; errors.Is(read(ctx), nats.ErrNoResponders); wait = min(2*wait, 200*time.Millisecond) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// openRecords creates or updates the workspace's records bucket. On the
// embedded store a new bucket is created with asynchronous persistence: a
// record is acknowledged before it is flushed, so that a publish has one
// synchronous durable write on its path (the message's), not two. A
// bucket keeps the persistence it was created with, which the store
// cannot change; the window it reports says which it has. With shared
// buckets the workspace's records are its keys of the bucket of its
// window, unless it has a bucket of its own from a bus of its own on this
// cluster (docs/pools.md, "Moving a Tenant between a bus of its own and a
// pool").
func (s *Store) openRecords(ctx context.Context, workspace string, window time.Duration, durable bool) (records, error) {
	bucket := RecordsBucket(workspace)
	if s.sharedBuckets {
		switch _, err := s.JS.Stream(ctx, "KV_"+bucket); {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			// The bucket's TTL is the window in whole seconds, as its name
			// says, so that one name is one TTL.
			window = window.Truncate(time.Second) + min(window%time.Second, 1)*time.Second
			bucket = SharedRecordsBucket(window)
			kv, stream, _, err := s.openRecordsBucket(ctx, bucket, "storybus idempotency records of the pooled workspaces whose window is "+window.String(), window, durable, true)
			if err != nil {
				return records{}, err
			}
			s.sharedRecords.Store(bucket, struct{}{})
			return records{
				kv: SharedKeys(kv, workspace), bucket: bucket, stream: stream,
				subjects: "$KV." + bucket + "." + SharedKeyPrefix(workspace),
				leader:   NewKVLeader(s.JS, bucket).Shared(workspace),
			}, nil
		case err != nil:
			return records{}, err
		}
	}
	kv, stream, lossWindow, err := s.openRecordsBucket(ctx, bucket, "storybus idempotency records of workspace "+workspace, window, durable, false)
	if err != nil {
		return records{}, err
	}
	return records{kv: kv, bucket: bucket, stream: stream, subjects: "$KV." + bucket + ".", leader: NewKVLeader(s.JS, bucket), lossWindow: lossWindow}, nil
}

// openRecordsBucket creates or updates a records bucket (openRecords). A
// shared one keeps the most replicas and the largest bound
// (Options.SharedRecordsMaxBytes) any pool asked for: pools on one
// cluster may ask for different ones, and would otherwise update the
// bucket back and forth.
func (s *Store) openRecordsBucket(ctx context.Context, bucket, description string, window time.Duration, durable, shared bool) (jetstream.KeyValue, jetstream.Stream, time.Duration, error) {
	cfg := recordsStreamConfig(bucket, description, window, s.replicas)
	cfg.AllowMsgTTL = s.messageTTLs()
	if shared && s.sharedRecordsMaxBytes > 0 {
		cfg.MaxBytes = s.sharedRecordsMaxBytes
	}
	if s.recordsLossWindow > 0 && !durable {
		cfg.PersistMode = jetstream.AsyncPersistMode
	}
	stream, err := CreateOrUpdate(ctx, func(ctx context.Context) (jetstream.Stream, error) {
		existing, err := s.JS.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return s.JS.CreateStream(ctx, cfg)
		case err != nil:
			return nil, err
		}
		cfg.PersistMode = existing.CachedInfo().Config.PersistMode
		// Message TTLs, once allowed, cannot be disallowed.
		cfg.AllowMsgTTL = cfg.AllowMsgTTL || existing.CachedInfo().Config.AllowMsgTTL
		if shared {
			have := existing.CachedInfo().Config
			cfg.Replicas = max(cfg.Replicas, have.Replicas)
			cfg.MaxBytes = largerBound(cfg.MaxBytes, have.MaxBytes)
		}
		if sameStreamConfig(existing.CachedInfo().Config, cfg) {
			return existing, nil
		}
		return s.JS.UpdateStream(ctx, cfg)
	})
	if err != nil {
		return nil, nil, 0, err
	}
	// Another bus may have created the bucket a moment ago, before the
	// server asked here knew of it.
	kv, err := CreateOrUpdate(ctx, func(ctx context.Context) (jetstream.KeyValue, error) {
		return s.JS.KeyValue(ctx, bucket)
	})
	if err != nil {
		return nil, nil, 0, err
	}
	if cfg.PersistMode != jetstream.AsyncPersistMode || s.cleanStart {
		return kv, stream, 0, nil
	}
	return kv, stream, s.recordsLossWindow, nil
}

// largerBound is the larger of two streams' MaxBytes where a bound (over
// 0) is larger than none; none when neither has one.
func largerBound(asked, have int64) int64 {
	if b := max(asked, have); b > 0 {
		return b
	}
	return -1
}

// RecordsDuplicateWindow is the records bucket's duplicate window, the
// shortest nats-server accepts. No record is written with a Nats-Msg-Id,
// so the window never drops anything; but a starting nats-server reads
// back every message of each stream's window to rebuild it, and with
// nats.go's default of 2 minutes that is every record written in the 2
// minutes before a crash: most of the embedded store's start after one.
const RecordsDuplicateWindow = 100 * time.Millisecond

// openStream opens stream cfg.Name: a stream that exists with cfg's
// settings is only looked up, since an update, even to the same settings,
// is a write the server persists (and on a cluster a proposal its peers
// agree on), and a replica restarting over a thousand workspaces would
// make thousands; a missing or different one is created or updated.
func openStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	existing, err := js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return js.CreateOrUpdateStream(ctx, cfg)
	case err != nil:
		return nil, err
	case sameStreamConfig(existing.CachedInfo().Config, cfg):
		return existing, nil
	}
	return js.UpdateStream(ctx, cfg)
}

// sameStreamConfig reports whether a stream's settings, as the server
// reports them, are those of want, the bus's: every setting the bus
// makes, with the server's defaults for those it leaves unset (-1 for
// "no limit", its two minutes for an unset duplicate window).
func sameStreamConfig(have, want jetstream.StreamConfig) bool {
	norm := func(v int64) int64 { return max(v, -1) }
	unlimited := func(want int64) int64 {
		if want == 0 {
			return -1
		}
		return norm(want)
	}
	dups := want.Duplicates
	if dups == 0 {
		dups = 2 * time.Minute
	}
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention && have.Discard == want.Discard && have.Storage == want.Storage &&
		max(have.Replicas, 1) == max(want.Replicas, 1) && have.Duplicates == dups && have.MaxAge == want.MaxAge &&
		have.AllowDirect == want.AllowDirect && have.AllowRollup == want.AllowRollup && have.DenyDelete == want.DenyDelete &&
		norm(have.MaxMsgsPerSubject) == unlimited(want.MaxMsgsPerSubject) && norm(have.MaxBytes) == unlimited(want.MaxBytes) &&
		int64(have.MaxMsgSize) == unlimited(int64(want.MaxMsgSize)) && norm(have.MaxMsgs) == unlimited(want.MaxMsgs) &&
		int64(have.MaxConsumers) == unlimited(int64(want.MaxConsumers)) && have.PersistMode == want.PersistMode &&
		have.AllowMsgTTL == want.AllowMsgTTL
}

// messageTTLs reports whether the server the store is connected to
// allows per-message TTLs (nats-server 2.11 and newer): an older one
// would not keep the setting, and every open would update its buckets
// again.
func (s *Store) messageTTLs() bool {
	return allowsMessageTTLs(s.JS.Conn().ConnectedServerVersion())
}

// allowsMessageTTLs reports whether a nats-server of the version given
// ("2.11.4", "2.12.0-RC.1") allows per-message TTLs: 2.11 and newer. A
// version it cannot read is taken as older.
func allowsMessageTTLs(version string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 11
}

// recordsStreamConfig is the stream behind a records bucket: a key-value
// bucket as nats.go makes one (history 1, TTL the idempotency window), so
// that it is read and written through jetstream.KeyValue, but for its
// duplicate window (RecordsDuplicateWindow).
func recordsStreamConfig(bucket, description string, window time.Duration, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              "KV_" + bucket,
		Description:       description,
		Subjects:          []string{"$KV." + bucket + ".>"},
		MaxMsgsPerSubject: 1,
		MaxBytes:          -1,
		MaxAge:            window,
		MaxMsgSize:        -1,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		Storage:           jetstream.FileStorage,
		Replicas:          replicas,
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        RecordsDuplicateWindow,
		AllowDirect:       true,
		Discard:           jetstream.DiscardNew,
	}
}
