package client

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ConsumerOptions configure a Consumer.
type ConsumerOptions struct {
	// URL is the bus's base URL; Workspace the workspace id.
	URL       string
	Workspace string
	// Name is the consumer's name: 1 to 64 letters, digits, '-' or '_'. It
	// names a durable subscription: a consumer that comes back under the
	// same name carries on where it left off. It belongs to the connection
	// that first used it.
	Name string
	// Families are the families to receive; none means every family the
	// connection may consume.
	Families []string
	// Tokens gives the bearer tokens; usually a *ClientCredentials.
	Tokens TokenSource
	// HTTPClient sends the requests; default a plain http.Client.
	HTTPClient *http.Client
	// Max is the most messages one pull returns, 1 to 100; default 10.
	Max int
	// Wait is how long a pull waits for a first message, up to 20 s;
	// default 20 s. NoWait makes every pull return at once.
	Wait   time.Duration
	NoWait bool
	// Dedup drops redelivered messages; default NewDedup(0, 0, Clock), in
	// memory. OpenDedup's keeps them across restarts.
	Dedup *Dedup
	// Retry paces the pulls after failures (the attempts are not bounded:
	// Run keeps pulling until its context ends).
	Retry RetryPolicy
	// Clock defaults to the wall clock; Jitter to math/rand/v2.
	Clock  Clock
	Jitter func() float64
	// OnError, when set, is told of every failed pull, acknowledgement and
	// handler call that Run carries on after.
	OnError func(error)
	// TracerProvider starts the span of every handler call, a child of the
	// trace the message was published in (Delivery.Traceparent); default
	// OpenTelemetry's global provider, which traces nothing until the
	// program installs one. The handler's context carries the message's
	// trace context either way.
	TracerProvider trace.TracerProvider
}

// Delivery is one delivered message.
type Delivery struct {
	MessageID   string `json:"message_id"`
	MessageType string `json:"message_type"`
	Family      string `json:"family"`
	// AckID acknowledges this delivery, and only this one.
	AckID string `json:"ack_id"`
	// Delivery counts the deliveries of the message to this consumer: 2
	// and more are redeliveries.
	Delivery int `json:"delivery"`
	// Traceparent and Tracestate are the W3C trace context the message
	// was published in, when its producer or the bus traced it.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
	// Message is the SOM message exactly as the bus accepted it.
	Message json.RawMessage `json:"message"`
}

// Consumer pulls a workspace's messages over the bus's HTTP pull API.
// Delivery is at least once: a message not acknowledged within the bus's
// ack timeout (30 s) is delivered again, and Run drops the duplicates by
// message_id.
type Consumer struct {
	ep      *endpoint
	o       ConsumerOptions
	dedup   *Dedup
	query   string
	timeout time.Duration
	tracer  trace.Tracer
}

// ackTimeout bounds the acknowledgement of a handled batch.
const ackTimeout = 10 * time.Second

var consumerNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// NewConsumer returns a consumer.
func NewConsumer(o ConsumerOptions) (*Consumer, error) {
	if !consumerNamePattern.MatchString(o.Name) {
		return nil, errors.New("client: a consumer name is 1 to 64 letters, digits, '-' or '_'")
	}
	if o.Tokens == nil {
		return nil, errors.New("client: a TokenSource is required")
	}
	hc := o.HTTPClient
	ep, err := newEndpoint(o.URL, o.Workspace, hc)
	if err != nil {
		return nil, err
	}
	if o.Max <= 0 {
		o.Max = 10
	}
	if o.Wait <= 0 || o.NoWait {
		o.Wait = 20 * time.Second
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	if o.Jitter == nil {
		o.Jitter = rand.Float64
	}
	o.Retry = o.Retry.withDefaults()
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	c := &Consumer{ep: ep, o: o, dedup: o.Dedup, timeout: o.Wait + 15*time.Second, tracer: o.TracerProvider.Tracer(tracerName)}
	if c.dedup == nil {
		c.dedup = NewDedup(0, 0, o.Clock)
	}
	q := url.Values{}
	q.Set("max", strconv.Itoa(o.Max))
	q.Set("wait", o.Wait.String())
	if o.NoWait {
		q.Set("wait", "0s")
	}
	if len(o.Families) > 0 {
		q.Set("family", strings.Join(o.Families, ","))
	}
	c.query = q.Encode()
	return c, nil
}

// Dedup returns the consumer's de-duplicator.
func (c *Consumer) Dedup() *Dedup { return c.dedup }

// Fetch pulls once: it returns as soon as a message is there, with up to
// Max of them, or empty-handed after Wait. Duplicates are not dropped here;
// Run drops them. A 401 is retried once with a fresh token.
func (c *Consumer) Fetch(ctx context.Context) ([]Delivery, error) {
	a, err := c.call(ctx, request{method: http.MethodGet, path: "/consumers/" + c.o.Name + "/messages?" + c.query})
	if err != nil {
		return nil, err
	}
	var out struct {
		Messages []Delivery `json:"messages"`
	}
	if err := json.Unmarshal(a.body, &out); err != nil {
		return nil, noAnswer(errors.New("the pull answer is not JSON"))
	}
	return out.Messages, nil
}

// Ack acknowledges deliveries: they are not delivered again.
func (c *Consumer) Ack(ctx context.Context, ds ...Delivery) error {
	// No action: a plain ack, which every bus understands.
	return c.settle(ctx, ackRequest{}, ds)
}

// Nak gives deliveries back unhandled: they are delivered again after
// delay (0: at once; at most an hour). Nak, InProgress and Term need a bus
// whose ack route takes an action.
func (c *Consumer) Nak(ctx context.Context, delay time.Duration, ds ...Delivery) error {
	r := ackRequest{Action: "nak"}
	if delay > 0 {
		r.Delay = delay.String()
	}
	return c.settle(ctx, r, ds)
}

// InProgress reports that deliveries are still being handled: their ack
// timeout (30 s) starts again.
func (c *Consumer) InProgress(ctx context.Context, ds ...Delivery) error {
	return c.settle(ctx, ackRequest{Action: "in_progress"}, ds)
}

// Term gives up on deliveries the consumer can never handle: they are not
// delivered again, as if acknowledged.
func (c *Consumer) Term(ctx context.Context, ds ...Delivery) error {
	return c.settle(ctx, ackRequest{Action: "term"}, ds)
}

// ackRequest is the body of the ack route.
type ackRequest struct {
	AckIDs []string `json:"ack_ids"`
	Action string   `json:"action,omitempty"`
	Delay  string   `json:"delay,omitempty"`
}

// settle sends r's action for deliveries, at most 1,000 per request.
func (c *Consumer) settle(ctx context.Context, r ackRequest, ds []Delivery) error {
	for len(ds) > 0 {
		n := min(len(ds), 1000)
		r.AckIDs = make([]string, n)
		for i, d := range ds[:n] {
			r.AckIDs[i] = d.AckID
		}
		body, _ := json.Marshal(r)
		if _, err := c.call(ctx, request{method: http.MethodPost, path: "/consumers/" + c.o.Name + "/acks", body: body}); err != nil {
			return err
		}
		ds = ds[n:]
	}
	return nil
}

// call sends one request with a token, once more with a fresh token after
// a 401, and returns a 200 answer or an *Error.
func (c *Consumer) call(ctx context.Context, r request) (*answer, error) {
	for refreshed := false; ; refreshed = true {
		tok, err := c.o.Tokens.Token(ctx)
		if err != nil {
			return nil, err
		}
		r.token = tok
		actx, cancel := context.WithTimeout(ctx, c.timeout)
		a, err := c.ep.do(actx, r)
		cancel()
		if err != nil {
			return nil, noAnswer(err)
		}
		switch {
		case a.status == http.StatusOK:
			return a, nil
		case a.status == http.StatusUnauthorized && !refreshed:
			c.o.Tokens.Invalidate(tok)
			continue
		}
		return nil, a.failure(c.o.Clock.Now())
	}
}

// Handler handles one message. An error leaves the message unacknowledged:
// it is delivered again after the ack timeout.
type Handler func(ctx context.Context, d Delivery) error

// Run pulls and hands every message to h, once per message_id, until ctx
// ends, when it returns nil; the messages of a pull that come after ctx
// ends are left unacknowledged, to be delivered again. A handled message is acknowledged; a duplicate
// of a handled one is acknowledged without calling h. Temporary failures
// (no answer, 429, 5xx) are retried with backoff, honouring Retry-After,
// for as long as it runs; any other failure (a 401 after a fresh token, a
// 403) ends Run with that error.
func (c *Consumer) Run(ctx context.Context, h Handler) error {
	failures := 0
	for ctx.Err() == nil {
		ds, err := c.Fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			e, _ := AsError(err)
			if e == nil || !e.Temporary() {
				return err
			}
			c.report(err)
			failures++
			if c.o.Clock.Sleep(ctx, max(c.o.Retry.Backoff(failures, c.o.Jitter()), e.RetryAfter)) != nil {
				return nil
			}
			continue
		}
		failures = 0
		c.handle(ctx, ds, h)
	}
	return nil
}

func (c *Consumer) report(err error) {
	if c.o.OnError != nil {
		c.o.OnError(err)
	}
}

// RunOnce pulls once and hands what came to h as Run does: duplicates are
// acknowledged without calling h, handled messages are acknowledged, and
// a message h fails is left to be delivered again. A failed pull is
// returned, not retried.
func (c *Consumer) RunOnce(ctx context.Context, h Handler) error {
	ds, err := c.Fetch(ctx)
	if err != nil {
		return err
	}
	c.handle(ctx, ds, h)
	return nil
}

// handleOne hands one message to h in a consumer span that continues the trace
// the message was published in.
func (c *Consumer) handleOne(ctx context.Context, h Handler, d Delivery) error {
	if d.Traceparent != "" {
		ctx = traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": d.Traceparent, "tracestate": d.Tracestate})
	}
	ctx, span := c.tracer.Start(ctx, "handle "+d.Family, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("messaging.message.id", d.MessageID),
		attribute.String("messaging.operation.type", "process"),
		attribute.Int("messaging.message.delivery", d.Delivery),
	))
	defer span.End()
	err := h(ctx, d)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// handle hands a pull's messages to h, once per message_id, until ctx
// ends, and acknowledges the handled ones and the duplicates.
func (c *Consumer) handle(ctx context.Context, ds []Delivery, h Handler) {
	var done []Delivery
	for _, d := range ds {
		if ctx.Err() != nil {
			break
		}
		if d.MessageID != "" && c.dedup.Seen(d.MessageID) {
			done = append(done, d)
			continue
		}
		if err := c.handleOne(ctx, h, d); err != nil {
			c.report(err)
			continue
		}
		if d.MessageID != "" {
			if err := c.dedup.Done(d.MessageID); err != nil {
				c.report(err)
			}
		}
		done = append(done, d)
	}
	if len(done) > 0 {
		// Handled messages are acknowledged even when ctx has just
		// ended. A failed acknowledgement means a redelivery, which the
		// de-duplicator drops.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		if err := c.Ack(actx, done...); err != nil {
			c.report(err)
		}
		cancel()
	}
}
