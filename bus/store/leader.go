package store

// Reads from a stream's leader. Every stream and bucket of the bus allows
// direct gets, which on a cluster any replica of the stream answers (the
// servers pick one at random, wherever the client is connected), with no
// wait for the leader: the publish path reads that way. A replica may be
// behind the leader, though: a follower applies a write a moment after
// the leader acknowledged it, and one catching up after a restart serves
// direct gets once it is 90% synchronised. So a compare-and-swap made on a
// direct read can fail because the read was behind, with no other writer.
// The leader holds the state the compare-and-swap was checked against: a
// failed one is confirmed by a read from it before anyone is told another
// writer raced them (docs/pools.md, "Reads that any replica answers").

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Leader reads one stream's messages from its leader: the JetStream API's
// STREAM.MSG.GET, which on a cluster only the stream's leader answers,
// never a direct get. On a single server it reads as a direct get does.
type Leader struct {
	js     jetstream.JetStream
	stream string
	// tracer, when set, makes each read a client span.
	tracer trace.Tracer
}

// NewLeader returns the reader of stream's leader.
func NewLeader(js jetstream.JetStream, stream string) Leader {
	return Leader{js: js, stream: stream}
}

// msgGetRequest is the JetStream API's STREAM.MSG.GET request.
type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

// msgGetResponse is its answer.
type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string    `json:"subject"`
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// LastMsgForSubject reads the last message on subject, as the leader has
// it; jetstream.ErrMsgNotFound when there is none.
func (l Leader) LastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	return l.get(ctx, "stream get last (leader)", msgGetRequest{LastFor: subject})
}

// GetMsg reads the message at stream sequence seq, as the leader has it;
// jetstream.ErrMsgNotFound when there is none.
func (l Leader) GetMsg(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	return l.get(ctx, "stream get (leader)", msgGetRequest{Seq: seq})
}

func (l Leader) get(ctx context.Context, op string, req msgGetRequest) (m *jetstream.RawStreamMsg, err error) {
	if l.tracer != nil {
		var span trace.Span
		ctx, span = start(ctx, l.tracer, op, attribute.String("storybus.store.stream", l.stream))
		defer func() { end(span, err) }()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(l.js.Options().DefaultTimeout, 5*time.Second))
		defer cancel()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	answer, err := l.js.Conn().RequestWithContext(ctx, apiPrefix(l.js.Options())+"STREAM.MSG.GET."+l.stream, body)
	if err != nil {
		return nil, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(answer.Data, &resp); err != nil {
		return nil, err
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	msg := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if msg.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, err
		}
	}
	return msg, nil
}

// apiPrefix is the subject prefix of the JetStream API requests of js.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}

// KVLeader reads a key-value bucket from its stream's leader: the same
// entries as jetstream.KeyValue's Get and GetRevision, never behind the
// leader.
type KVLeader struct {
	Leader
	bucket string
	// prefix begins each key in the bucket: a workspace's, in a shared
	// bucket (SharedKeys), or none.
	prefix string
}

// NewKVLeader returns the reader of the leader of bucket's stream.
func NewKVLeader(js jetstream.JetStream, bucket string) KVLeader {
	return KVLeader{Leader: NewLeader(js, "KV_"+bucket), bucket: bucket}
}

// Shared returns the reader of workspace's keys in l's bucket, a shared
// one: the leader's side of SharedKeys.
func (l KVLeader) Shared(workspace string) KVLeader {
	l.prefix = SharedKeyPrefix(workspace)
	return l
}

// subject is the subject of key's values.
func (l KVLeader) subject(key string) string { return "$KV." + l.bucket + "." + l.prefix + key }

// Get reads the latest value of key: jetstream.ErrKeyNotFound when it
// holds none (never written, deleted, purged or expired).
func (l KVLeader) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	m, err := l.LastMsgForSubject(ctx, l.subject(key))
	return l.entry(key, m, err)
}

// GetRevision reads key at revision: jetstream.ErrKeyNotFound when that
// revision is not the key's, or not a value.
func (l KVLeader) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	m, err := l.GetMsg(ctx, revision)
	if err == nil && m.Subject != l.subject(key) {
		return nil, jetstream.ErrKeyNotFound
	}
	return l.entry(key, m, err)
}

// entry makes a read message an entry of key, as jetstream.KeyValue does:
// a delete or purge marker (one the bucket writes, or one the server
// leaves when a key expires) is no value.
func (l KVLeader) entry(key string, m *jetstream.RawStreamMsg, err error) (jetstream.KeyValueEntry, error) {
	switch {
	case IsMissing(err):
		return nil, jetstream.ErrKeyNotFound
	case err != nil:
		return nil, err
	case m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "":
		return nil, jetstream.ErrKeyNotFound
	}
	return kvEntry{bucket: l.bucket, key: key, msg: m}, nil
}

// kvEntry is a value read from a bucket's leader.
type kvEntry struct {
	bucket, key string
	msg         *jetstream.RawStreamMsg
}

func (e kvEntry) Bucket() string                  { return e.bucket }
func (e kvEntry) Key() string                     { return e.key }
func (e kvEntry) Value() []byte                   { return e.msg.Data }
func (e kvEntry) Revision() uint64                { return e.msg.Sequence }
func (e kvEntry) Created() time.Time              { return e.msg.Time }
func (e kvEntry) Delta() uint64                   { return 0 }
func (e kvEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
