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
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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
}

// Store is a connection to JetStream.
type Store struct {
	Conn     *nats.Conn
	JS       jetstream.JetStream
	replicas int
}

// Connect connects to the embedded server or the external cluster.
func Connect(o Options) (*Store, error) {
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
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
	return &Store{Conn: nc, JS: js, replicas: replicas}, nil
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

// Workspace is one workspace's slice of the store.
type Workspace struct {
	ID string
	// Stream is the workspace's topic; story heads are its per-story subjects.
	Stream jetstream.Stream
	// Records is the idempotency record bucket.
	Records jetstream.KeyValue
}

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
// messages for retention (0: until the store's limits).
func (s *Store) OpenWorkspace(ctx context.Context, workspace string, window, retention time.Duration) (*Workspace, error) {
	stream, err := s.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName(workspace),
		Description: "storybus topic of workspace " + workspace,
		Subjects:    []string{"som." + workspace + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		Storage:     jetstream.FileStorage,
		Replicas:    s.replicas,
		Duplicates:  DuplicateWindow,
		MaxAge:      retention,
		AllowDirect: true,
	})
	if err != nil {
		return nil, fmt.Errorf("topic stream of %s: %w", workspace, err)
	}
	kv, err := s.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      RecordsBucket(workspace),
		Description: "storybus idempotency records of workspace " + workspace,
		History:     1,
		TTL:         window,
		Storage:     jetstream.FileStorage,
		Replicas:    s.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("records bucket of %s: %w", workspace, err)
	}
	return &Workspace{ID: workspace, Stream: stream, Records: kv}, nil
}

// IsWrongLastSequence reports whether err is a JetStream compare-and-swap
// failure: a publish whose expected last sequence did not match. Replicated
// streams answer with a different code than single-replica ones.
func IsWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
