package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"
)

// RequestIDHeader carries a request's id. Every answer on the publish port
// has it: the producer's own id when it sent one that ValidRequestID
// accepts, otherwise one the bus made. The id is in every log line about
// the request and in the body of 5xx answers, for the producer to quote.
const RequestIDHeader = "X-Request-Id"

// MaxRequestIDLength is the longest request id the bus keeps from a
// producer.
const MaxRequestIDLength = 128

// ValidRequestID reports whether a producer's request id is kept: 1 to 128
// characters of visible ASCII (no spaces, no control characters) other
// than the comma, which joins repeated headers. Anything else is replaced,
// so that an id can neither forge a log line nor grow without bound.
func ValidRequestID(id string) bool {
	if len(id) == 0 || len(id) > MaxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == ',' {
			return false
		}
	}
	return true
}

// newRequestID makes a request id: 128 random bits in hex, unique across
// the bus's replicas without coordination.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// exchange is what the bus learns about one request on the publish port as
// it is answered: its id, and the connection and message once a stage
// knows them. It travels in the request's context, where the log handler
// and the access log find it.
type exchange struct {
	id string
	// traceID is the request's trace, when the bus traces or the producer
	// sent a traceparent; empty otherwise.
	traceID    string
	connection string
	messageID  string
	storyID    string
}

type exchangeKey struct{}

// exchangeOf returns the exchange of the request ctx belongs to, or nil.
func exchangeOf(ctx context.Context) *exchange {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	return x
}

// noteRequest records what the stages learnt of a request: its connection
// once authenticated, its message once parsed.
func noteRequest(r *request) {
	x := exchangeOf(r.c.Request.Context())
	if x == nil {
		return
	}
	if r.conn != nil {
		x.connection = r.conn.Name
	}
	if r.msg != nil {
		x.messageID, x.storyID = r.msg.MessageID, r.msg.StoryID
	}
}

// track is the publish port's outermost handler: it gives the request its
// id, answers with it in X-Request-Id, and once the request is answered
// (or abandoned) writes its access log line.
func (s *Server) track(c *gin.Context) {
	start := time.Now()
	id := ""
	if ids := c.Request.Header.Values(RequestIDHeader); len(ids) == 1 && ValidRequestID(ids[0]) {
		id = ids[0]
	} else {
		id = newRequestID()
	}
	x := &exchange{id: id}
	ctx, span := s.startRequestSpan(withProducerTrace(c.Request.Context(), c.Request), c)
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		x.traceID = sc.TraceID().String()
	}
	c.Request = c.Request.WithContext(context.WithValue(ctx, exchangeKey{}, x))
	c.Header(RequestIDHeader, id)
	if s.access != nil || span != nil {
		defer s.finish(c, x, start, span)
	}
	c.Next()
}

// finish writes a request's access log line and ends its span, once it is
// answered or abandoned.
func (s *Server) finish(c *gin.Context, x *exchange, start time.Time, span trace.Span) {
	status := 0
	if c.Writer.Written() {
		status = c.Writer.Status()
	}
	rule, _ := c.Get(ctxRule)
	r, _ := rule.(string)
	if span != nil {
		endRequestSpan(span, x, status, r)
	}
	if s.access != nil {
		s.accessLog(c, x, start, status, r)
	}
}

// accessLog writes a request's access log line. It names what on-call
// needs to find the request (its id, workspace, connection, message and
// story, and its trace when there is one) and how it was answered, and
// never a header, a token, a secret or a body.
func (s *Server) accessLog(c *gin.Context, x *exchange, start time.Time, status int, rule string) {
	answered := "aborted"
	if status != 0 {
		answered = strconv.Itoa(status)
	}
	s.access.LogAttrs(c.Request.Context(), slog.LevelInfo, "request",
		slog.String("requestID", x.id),
		slog.String("workspace", c.Param("tenant")),
		slog.String("connection", x.connection),
		slog.String("route", routeName(c)),
		slog.String("status", answered),
		slog.String("rule", rule),
		slog.String("messageID", x.messageID),
		slog.String("storyID", x.storyID),
		slog.Float64("latencyMs", float64(time.Since(start).Microseconds())/1000),
		slog.String("clientAddress", clientAddress(c)),
		slog.String("traceID", x.traceID),
	)
}

// routeName names the route a request took, as the access log and the
// traces call it; "unknown" for a path or method the API lacks.
func routeName(c *gin.Context) string {
	switch c.FullPath() {
	case "/v1/tenants/:tenant/messages":
		return "publish"
	case "/v1/tenants/:tenant/iam/messages":
		return "publish_iam"
	case "/v1/tenants/:tenant/tokens":
		return "tokens"
	case "/v1/tenants/:tenant/consumers/:name/messages":
		return "pull"
	case "/v1/tenants/:tenant/consumers/:name/acks":
		return "ack"
	}
	return "unknown"
}

// requestIDs is a log handler that adds the request id, and the trace id
// when there is one, to every line logged with the context of a request on
// the publish port.
type requestIDs struct{ slog.Handler }

// Handle implements slog.Handler.
func (h requestIDs) Handle(ctx context.Context, r slog.Record) error {
	if x := exchangeOf(ctx); x != nil {
		r.AddAttrs(slog.String("requestID", x.id))
		if x.traceID != "" {
			r.AddAttrs(slog.String("traceID", x.traceID))
		}
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h requestIDs) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDs{h.Handler.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h requestIDs) WithGroup(name string) slog.Handler {
	return requestIDs{h.Handler.WithGroup(name)}
}

// requestIDOf returns the id of the request c, for 5xx answers.
func requestIDOf(c *gin.Context) string {
	if x := exchangeOf(c.Request.Context()); x != nil {
		return x.id
	}
	return ""
}
