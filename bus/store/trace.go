package store

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the tracer of the store's spans.
const TracerName = "github.com/storybus/storybus/bus/store"

// HeaderCarrier reads and writes a NATS message's headers for OpenTelemetry
// propagators. Keys are kept exactly as the propagator names them
// (traceparent, tracestate), as NATS headers are case-sensitive and other
// languages' instrumentations read them in lower case.
type HeaderCarrier nats.Header

// Get returns the first value of key.
func (h HeaderCarrier) Get(key string) string { return nats.Header(h).Get(key) }

// Set replaces the values of key with value.
func (h HeaderCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }

// Keys lists the header names.
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// Publisher publishes to a topic; *jetstream.JetStream is one.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// TracePublisher wraps a topic publisher so that every published message
// carries the W3C trace context of its publish in its headers, for the
// consumers to continue the trace. With tp set, each publish is also a
// producer span; without it, the trace context of the request (a
// producer's traceparent) passes through unchanged.
func TracePublisher(next Publisher, tp trace.TracerProvider) Publisher {
	p := &tracingPublisher{next: next}
	if tp != nil {
		p.tracer = tp.Tracer(TracerName)
	}
	return p
}

type tracingPublisher struct {
	next   Publisher
	tracer trace.Tracer
}

// PublishMsg publishes msg with the trace context of ctx in its headers.
func (p *tracingPublisher) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	var span trace.Span
	if p.tracer != nil {
		ctx, span = p.tracer.Start(ctx, "publish", trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", msg.Subject),
			attribute.String("messaging.message.id", msg.Header.Get(nats.MsgIdHdr)),
		))
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		if msg.Header == nil {
			msg.Header = nats.Header{}
		}
		propagation.TraceContext{}.Inject(ctx, HeaderCarrier(msg.Header))
	}
	ack, err := p.next.PublishMsg(ctx, msg, opts...)
	if span != nil {
		if ack != nil {
			span.SetAttributes(attribute.Int64("storybus.stream.sequence", int64(ack.Sequence)), attribute.Bool("storybus.duplicate", ack.Duplicate))
		}
		end(span, err)
	}
	return ack, err
}

// Traced returns the workspace with its records bucket and topic stream
// wrapped so that every operation on them is a client span of tp's.
func (w *Workspace) Traced(tp trace.TracerProvider) *Workspace {
	tracer := tp.Tracer(TracerName)
	out := *w
	out.Records = &tracedKV{KeyValue: w.Records, tracer: tracer, bucket: attribute.String("storybus.store.bucket", w.RecordsBucket)}
	out.Stream = &tracedStream{Stream: w.Stream, tracer: tracer, stream: attribute.String("storybus.store.stream", StreamName(w.ID))}
	out.StreamLeader.tracer, out.RecordsLeader.tracer = tracer, tracer
	return &out
}

// start begins a client span for a store operation.
func start(ctx context.Context, tracer trace.Tracer, name string, target attribute.KeyValue) (context.Context, trace.Span) {
	return tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("db.system.name", "nats"), target))
}

// end ends a store operation's span, recording its error. A key or
// message not found is an answer (a new message, a new story), not a
// failure.
func end(span trace.Span, err error) {
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrMsgNotFound):
		span.SetAttributes(attribute.Bool("storybus.store.found", false))
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// tracedKV is a records bucket whose operations the publish core uses are
// client spans.
type tracedKV struct {
	jetstream.KeyValue
	tracer trace.Tracer
	bucket attribute.KeyValue
}

func (kv *tracedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	ctx, span := start(ctx, kv.tracer, "records get", kv.bucket)
	e, err := kv.KeyValue.Get(ctx, key)
	end(span, err)
	return e, err
}

func (kv *tracedKV) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	ctx, span := start(ctx, kv.tracer, "records get revision", kv.bucket)
	e, err := kv.KeyValue.GetRevision(ctx, key, revision)
	end(span, err)
	return e, err
}

func (kv *tracedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	ctx, span := start(ctx, kv.tracer, "records create", kv.bucket)
	rev, err := kv.KeyValue.Create(ctx, key, value, opts...)
	end(span, err)
	return rev, err
}

func (kv *tracedKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	ctx, span := start(ctx, kv.tracer, "records update", kv.bucket)
	rev, err := kv.KeyValue.Update(ctx, key, value, revision)
	end(span, err)
	return rev, err
}

func (kv *tracedKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	ctx, span := start(ctx, kv.tracer, "records delete", kv.bucket)
	err := kv.KeyValue.Delete(ctx, key, opts...)
	end(span, err)
	return err
}

func (kv *tracedKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	ctx, span := start(ctx, kv.tracer, "records purge", kv.bucket)
	err := kv.KeyValue.Purge(ctx, key, opts...)
	end(span, err)
	return err
}

func (kv *tracedKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	ctx, span := start(ctx, kv.tracer, "records status", kv.bucket)
	st, err := kv.KeyValue.Status(ctx)
	end(span, err)
	return st, err
}

// tracedStream is a topic stream whose reads the publish core uses are
// client spans.
type tracedStream struct {
	jetstream.Stream
	tracer trace.Tracer
	stream attribute.KeyValue
}

func (s *tracedStream) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	ctx, span := start(ctx, s.tracer, "stream get", s.stream)
	m, err := s.Stream.GetMsg(ctx, seq, opts...)
	end(span, err)
	return m, err
}

func (s *tracedStream) GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	ctx, span := start(ctx, s.tracer, "stream get last", s.stream)
	m, err := s.Stream.GetLastMsgForSubject(ctx, subject)
	end(span, err)
	return m, err
}
