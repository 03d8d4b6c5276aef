package bus_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/rules"
)

// A producer's trace: trace id 4bf9…4736, its span 00f0…02b7, sampled.
const (
	producerTrace       = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan        = "00f067aa0ba902b7"
	producerTraceparent = "00-" + producerTrace + "-" + producerSpan + "-01"
)

// tracedHarness is a harness that can consume, whose bus traces into an
// in-memory exporter; a nil exporter leaves tracing off.
func tracedHarness(t *testing.T, exp *tracetest.InMemoryExporter) *harness {
	t.Helper()
	o := bus.Options{}
	if exp != nil {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		o.TracerProvider = tp
	}
	h, _ := loggedHarness(t, false, o)
	if err := h.srv.Apply(context.Background(), consumerConfig("newsroom")); err != nil {
		t.Fatal(err)
	}
	return h
}

// postTraced publishes body with the producer's traceparent.
func (h *harness) postTraced(t *testing.T, token string, body []byte) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("traceparent", producerTraceparent)
	req.Header.Set("tracestate", "newsroom=cms")
	req.Header.Set(bus.RequestIDHeader, "cms-traced")
	return h.do(t, req)
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// serverSpan returns the one server span of the ended spans.
func serverSpan(t *testing.T, spans tracetest.SpanStubs) tracetest.SpanStub {
	t.Helper()
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindServer {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d server spans", len(out))
	}
	return out[0]
}

func TestPublishIsTracedFromTheProducersTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	h := tracedHarness(t, exp)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	exp.Reset()
	id := uuid.NewString()
	expect(t, h.postTraced(t, tok, snapshot(id, "harbour-bridge", 1, "cms")), http.StatusAccepted, "")

	spans := exp.GetSpans()
	srv := serverSpan(t, spans)
	if srv.Name != "POST /v1/tenants/:tenant/messages" || srv.Parent.TraceID().String() != producerTrace ||
		srv.Parent.SpanID().String() != producerSpan || !srv.Parent.IsRemote() {
		t.Fatalf("server span %q, parent %v", srv.Name, srv.Parent)
	}
	for k, want := range map[string]attribute.Value{
		"http.response.status_code": attribute.IntValue(202),
		"storybus.rule":             attribute.StringValue(""),
		"storybus.workspace":        attribute.StringValue("newsroom"),
		"storybus.connection":       attribute.StringValue("cms"),
		"storybus.request_id":       attribute.StringValue("cms-traced"),
		"messaging.message.id":      attribute.StringValue(id),
		"storybus.story_id":         attribute.StringValue("harbour-bridge"),
	} {
		if got, ok := attr(srv, k); !ok || got != want {
			t.Fatalf("server span %s = %v, want %v", k, got.String(), want.String())
		}
	}
	// Every span is in the producer's trace; the stages are the server
	// span's children, the store operations the publish core's.
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		if s.SpanContext.TraceID().String() != producerTrace {
			t.Fatalf("span %q is in trace %s", s.Name, s.SpanContext.TraceID())
		}
		byName[s.Name] = s
	}
	for _, stage := range []string{"size", "authentication", "connection, firewall and limits", "parse", "som", "grants", "publish core"} {
		s, ok := byName[stage]
		if !ok || s.Parent.SpanID() != srv.SpanContext.SpanID() {
			t.Fatalf("stage span %q missing or not the server span's child; spans %v", stage, names(spans))
		}
	}
	core := byName["publish core"]
	for _, op := range []string{"records create", "publish"} {
		s, ok := byName[op]
		if !ok || s.Parent.SpanID() != core.SpanContext.SpanID() {
			t.Fatalf("store span %q missing or not the publish core's child; spans %v", op, names(spans))
		}
	}
	if byName["records create"].SpanKind != trace.SpanKindClient || byName["publish"].SpanKind != trace.SpanKindProducer {
		t.Fatalf("store span kinds %v, %v", byName["records create"].SpanKind, byName["publish"].SpanKind)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

func TestRefusedRequestSpanRecordsItsRule(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	h := tracedHarness(t, exp)
	tok := h.token(t, "newsroom", "wire", wireSecret)
	exp.Reset()
	expect(t, h.postTraced(t, tok, snapshot("", "harbour-bridge", 1, "cms")), http.StatusForbidden, rules.GrantSystemID)
	spans := exp.GetSpans()
	srv := serverSpan(t, spans)
	if got, _ := attr(srv, "storybus.rule"); got.AsString() != rules.GrantSystemID {
		t.Fatalf("server span rule %q", got.String())
	}
	if got, _ := attr(srv, "http.response.status_code"); got.AsInt64() != 403 || srv.Status.Code == codes.Error {
		t.Fatalf("server span status %v, %v", got.String(), srv.Status)
	}
	for _, s := range spans {
		if s.Name == "grants" {
			if got, _ := attr(s, "storybus.rule"); got.AsString() != rules.GrantSystemID {
				t.Fatalf("grants stage rule %q", got.String())
			}
		}
		if s.Name == "publish core" {
			t.Fatal("a refused request reached the publish core")
		}
	}
}

func TestConsumedMessageCarriesTheProducersTrace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		traced bool
	}{{"traced", true}, {"tracing off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var exp *tracetest.InMemoryExporter
			if tc.traced {
				exp = tracetest.NewInMemoryExporter()
			}
			h := tracedHarness(t, exp)
			tok := h.token(t, "newsroom", "cms", cmsSecret)
			id := uuid.NewString()
			expect(t, h.postTraced(t, tok, snapshot(id, "harbour-bridge", 1, "cms")), http.StatusAccepted, "")
			untraced := h.post(t, "newsroom", tok, snapshot("", "other-story", 1, "cms"))
			expect(t, untraced, http.StatusAccepted, "")

			ds := h.pullUntil(t, "newsroom", "desk", h.token(t, "newsroom", "reader", readerSecret), "max=10", 2)
			var got, other bus.Delivery
			for _, d := range ds {
				if d.MessageID == id {
					got = d
				} else {
					other = d
				}
			}
			sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
				propagation.MapCarrier{"traceparent": got.Traceparent, "tracestate": got.Tracestate}))
			if sc.TraceID().String() != producerTrace || sc.TraceState().Get("newsroom") != "cms" {
				t.Fatalf("delivery traceparent %q tracestate %q", got.Traceparent, got.Tracestate)
			}
			// Traced, the consumer's parent is the bus's publish span;
			// untraced, the producer's span itself.
			want := producerSpan
			if tc.traced {
				for _, s := range exp.GetSpans() {
					if s.Name == "publish" && s.Parent.TraceID().String() == producerTrace {
						want = s.SpanContext.SpanID().String()
					}
				}
			}
			if sc.SpanID().String() != want {
				t.Fatalf("delivery's parent span %s, want %s", sc.SpanID(), want)
			}
			if other.Traceparent != "" && !tc.traced {
				t.Fatalf("a message published without a trace carries %q", other.Traceparent)
			}
		})
	}
}
