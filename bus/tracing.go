package bus

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the tracer of the bus's request and stage spans.
const TracerName = "github.com/storybus/storybus/bus"

// traceContext is the W3C trace context propagator: traceparent and
// tracestate, from producers and into published messages.
var traceContext propagation.TraceContext

// withProducerTrace returns ctx with the trace context the producer sent,
// if any. Without a traceparent header nothing is parsed or allocated.
func withProducerTrace(ctx context.Context, r *http.Request) context.Context {
	if len(r.Header["Traceparent"]) == 0 {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.HeaderCarrier(r.Header))
}

// startRequestSpan starts the server span of a request on the publish
// port; nil when tracing is off.
func (s *Server) startRequestSpan(ctx context.Context, c *gin.Context) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, nil
	}
	name, route := c.Request.Method, c.FullPath()
	if route != "" {
		name += " " + route
	}
	return s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", c.Request.Method),
		attribute.String("http.route", route),
		attribute.String("storybus.route", routeName(c)),
		attribute.String("storybus.workspace", c.Param("tenant")),
		attribute.String("client.address", clientAddress(c)),
	))
}

// endRequestSpan ends a request's server span with what the answer was.
// 5xx answers and abandoned requests are errors; refusals are not (the bus
// did its job), and carry their rule.
func endRequestSpan(span trace.Span, x *exchange, status int, rule string) {
	span.SetAttributes(
		attribute.String("storybus.request_id", x.id),
		attribute.String("storybus.rule", rule),
	)
	if x.connection != "" {
		span.SetAttributes(attribute.String("storybus.connection", x.connection))
	}
	if x.messageID != "" {
		span.SetAttributes(attribute.String("messaging.message.id", x.messageID))
	}
	if x.storyID != "" {
		span.SetAttributes(attribute.String("storybus.story_id", x.storyID))
	}
	switch {
	case status == 0:
		span.SetStatus(codes.Error, "abandoned without an answer")
	default:
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, rule)
		}
	}
	span.End()
}

// startSpan starts a child span of the request's span when it records;
// nil otherwise, so that a bus without tracing pays nothing per stage.
func startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nil
	}
	return parent.TracerProvider().Tracer(TracerName).Start(ctx, name)
}

// endStageSpan ends a stage's span with the rule it refused with, if any.
func endStageSpan(span trace.Span, out outcome) {
	if len(out.refusals) > 0 {
		span.SetAttributes(attribute.String("storybus.rule", out.refusals[0].Rule))
	}
	span.End()
}
