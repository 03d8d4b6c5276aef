package bus

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/policy"
	"github.com/storybus/storybus/rules"
)

// ctxRule is the gin context key under which an answer's rule is kept for
// metrics.
const ctxRule = "storybus.rule"

// request is one publish request as it passes the stages.
type request struct {
	c *gin.Context
	// iam is set on the AWS-signed routes.
	iam    bool
	limits policy.Limits
	ws     *workspace
	cfg    *config.Workspace
	body   []byte
	conn   *config.Connection
	msg    *som.Message
	retry  time.Duration
	// warnings are SOM's warnings (stage 8), reported when accepted.
	warnings []rules.Violation
	// contentType is the parsed Content-Type, read once by mediaType.
	contentType *contentType
	// reservation holds the request's slot of its connection's daily
	// quota, when it has one (limit), until countAccepted counts it or
	// the request ends.
	reservation *limits.Reservation
	// lost drops the answer of an accepted message (a sandbox's
	// SandboxLost).
	lost bool
	// release gives back the workspace's slot the request holds (admit).
	release func()
}

// contentType is a request's Content-Type: its media type in lower case,
// or empty when the header is absent, and the error of a malformed header.
type contentType struct {
	mediaType string
	err       error
}

// mediaType parses the request's Content-Type once for the gate (stage 4)
// and the parse stage (7).
func (r *request) mediaType() contentType {
	if r.contentType == nil {
		r.contentType = &contentType{}
		if ct := r.c.GetHeader("Content-Type"); ct != "" {
			r.contentType.mediaType, _, r.contentType.err = mime.ParseMediaType(ct)
		}
	}
	return *r.contentType
}

func one(v rules.Violation) []rules.Violation { return []rules.Violation{v} }

// publish handles POST /v1/tenants/{t}/messages.
func (s *Server) publish(c *gin.Context) { s.publishWith(c, s.pipelines.publish) }

// publishWith runs a publish pipeline: stages (built once by New), then
// the publish core.
func (s *Server) publishWith(c *gin.Context, stages []stage) {
	ws, ok := s.workspace(c.Param("tenant"))
	if !ok {
		missingAuthenticationToken(c)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	req := &request{c: c, ws: ws, cfg: ws.cfg.Load()}
	defer func() {
		if req.release != nil {
			req.release()
		}
	}()
	if !s.runStages(req, stages) {
		return
	}
	hash, err := req.msg.ContentHash()
	if err != nil { // Parse already refused what cannot be canonicalised
		refuse(c, 0, rules.New(rules.MessageNotJSON, "the message cannot be canonicalised: "+err.Error(), ""))
		return
	}
	ctx, span := startSpan(ctx, "publish core")
	out := ws.core.Publish(ctx, publish.Input{
		Msg:      req.msg,
		Hash:     hash,
		Warnings: req.warnings,
		Policy:   s.workspacePolicy(ctx, req),
	})
	if span != nil {
		if out.Refusal != nil {
			span.SetAttributes(attribute.String("storybus.rule", out.Refusal.Rule))
		}
		span.End()
	}
	switch {
	case out.Abandoned:
		panic(http.ErrAbortHandler)
	case out.Refusal != nil:
		s.holdRefusal(req, out.Refusal.Rule, out.RetryAfter)
		refuseIn(c, req.cfg, out.RetryAfter, *out.Refusal)
	case out.Duplicate:
		writeJSON(c, http.StatusOK, Duplicate{Accepted: true, Duplicate: true, MessageID: req.msg.MessageID})
	default:
		s.countAccepted(req)
		if req.lost {
			// Recorded and published: the answer alone is lost.
			panic(http.ErrAbortHandler)
		}
		tolerated := out.Tolerated
		if tolerated == nil {
			tolerated = []rules.Violation{}
		}
		writeAccepted(c, Accepted{
			Accepted: true, MessageID: req.msg.MessageID, MessageType: req.msg.MessageType,
			Family: req.msg.Family, Tolerated: tolerated,
		})
	}
}

// observe counts every answer of a route, by workspace, status and rule,
// with record. It runs outside the route's panic recovery, so it sees the
// 503 a panic becomes; an abandoned request (no answer) is counted with
// status "aborted". Requests for workspaces this bus does not serve are not
// counted: their names are the caller's to choose.
func (s *Server) observe(record func(workspace, status, rule string, d time.Duration)) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		defer func() {
			ws := c.Param("tenant")
			if _, served := s.workspace(ws); !served {
				return
			}
			status := "aborted"
			if c.Writer.Written() {
				status = strconv.Itoa(c.Writer.Status())
			}
			rule, _ := c.Get(ctxRule)
			r, _ := rule.(string)
			record(ws, status, r, time.Since(start))
		}()
		c.Next()
	}
}

// authenticate is stage 3: the bearer token.
func (s *Server) authenticate(r *request) outcome {
	scheme, token, ok := strings.Cut(r.c.GetHeader("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return refused(rules.New(rules.AuthTokenMissing, "send Authorization: Bearer <token>", ""))
	}
	now := s.opts.Clock.Now()
	claims, cfg, err := s.verifyToken(r, token, now)
	if err != nil {
		v, _ := rules.RuleOf(err)
		return refused(v)
	}
	if !claims.BoundTo(clientCertificate(r.c.Request)) {
		return refused(rules.New(rules.AuthTokenInvalid, "the token is bound to a client certificate (cnf x5t#S256); send it over a connection with that certificate", ""))
	}
	if claims.Workspace() != r.ws.id {
		return refused(rules.New(rules.WorkspaceMismatch, "the token was issued for workspace "+claims.Workspace(), ""))
	}
	r.conn, _ = cfg.Connection(claims.Connection())
	return outcome{}
}

// maxCachedTokens bounds the verified-token cache; producers reuse a token
// for its lifetime, so the cache holds about one per connection.
const maxCachedTokens = 10_000

// verifyToken verifies a bearer token, remembering the result until the
// token expires or its workspace's configuration changes (a rotation, a
// deactivation), so a producer's token is parsed once, not per request.
func (s *Server) verifyToken(r *request, token string, now time.Time) (*auth.Claims, *config.Workspace, error) {
	if claims, cfg, ok := s.tokens.Get(token, now, s.Config); ok {
		return claims, cfg, nil
	}
	cfg := r.cfg
	peek, ok := auth.Peek(token)
	if ok && peek.Workspace() != r.ws.id {
		// A token of another workspace this bus serves is verified with
		// that workspace's key, so that stage 4 can say workspace.mismatch.
		other, served := s.workspace(peek.Workspace())
		if !served {
			return nil, nil, rules.Refuse(rules.AuthTokenInvalid, "the token is malformed or badly signed", "")
		}
		cfg = other.cfg.Load()
	}
	claims, err := auth.Verify(cfg, token, now)
	if err != nil {
		return nil, nil, err
	}
	s.tokens.Add(token, claims, cfg)
	return claims, cfg, nil
}

// gate is stages 4 to 6 of the publish routes: the connection and the
// firewall, decided by the workspace policy in one evaluation, then the
// rate limit and daily quota it returns.
func (s *Server) gate(r *request) outcome { return s.gateAs(r, r.mediaType().mediaType, true) }

// ackGate is the ack route's gate. A consumer request accepts no message,
// so it takes no slot of the daily quota: only the request rate applies.
func (s *Server) ackGate(r *request) outcome { return s.gateAs(r, r.mediaType().mediaType, false) }

// pullGate is the pull route's gate, as ackGate, judging the request by
// pullMediaType.
func (s *Server) pullGate(r *request) outcome { return s.gateAs(r, pullMediaType(r), false) }

// pullMediaType is the media type the firewall judges a pull by. A pull
// has no body: the firewall's content types, which are about bodies, judge
// one without a Content-Type as the JSON it answers with.
func pullMediaType(r *request) string {
	if r.c.GetHeader("Content-Type") == "" {
		return "application/json"
	}
	return r.mediaType().mediaType
}

// gateAs decides the gate for a request of the media type, with the daily
// quota or the rate limit alone.
func (s *Server) gateAs(r *request, mediaType string, quota bool) outcome {
	if s.opts.WithoutPolicy {
		return outcome{}
	}
	depth := 0
	if r.cfg.Firewall.MaxJSONDepth > 0 {
		// Only a firewall with a depth rule needs the scan; leaving it 0
		// otherwise also keeps the policy's memoised decisions few.
		depth = jsonDepth(r.body)
	}
	verdict, err := r.ws.policy.Gate(r.c.Request.Context(), policy.GateInput{
		Connection: r.conn.Name,
		IAM:        r.iam,
		ClientIP:   clientAddress(r.c),
		MediaType:  mediaType,
		JSONDepth:  depth,
		Body:       r.body,
	})
	if err != nil {
		s.log.ErrorContext(r.c.Request.Context(), "policy evaluation failed", "workspace", r.ws.id, "stage", "gate", "error", err)
		r.retry = time.Second
		return refused(rules.New(rules.BusUnavailable, "internal error; retry with the same message_id and body", ""))
	}
	if verdict.Refusal != nil {
		return refused(*verdict.Refusal)
	}
	r.limits = verdict.Limits
	return refused(s.limit(r, quota)...)
}

// jsonDepth returns the deepest nesting of objects and arrays in a JSON
// text, without parsing it; brackets inside strings do not count.
func jsonDepth(b []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// parse is stage 7: one JSON object.
func parse(r *request) outcome {
	if ct := r.c.GetHeader("Content-Type"); ct != "" {
		mt := r.mediaType()
		if mt.err != nil || !(mt.mediaType == "application/json" || strings.HasSuffix(mt.mediaType, "+json")) {
			return refused(rules.New(rules.MessageNotJSON, "Content-Type must be application/json, not "+strconv.Quote(ct), ""))
		}
	}
	msg, err := som.Parse(r.body)
	if err != nil {
		path := ""
		if pe, ok := errors.AsType[*som.ParseError](err); ok {
			path = pe.Path
		}
		return refused(rules.New(rules.MessageNotJSON, err.Error(), path))
	}
	r.msg = msg
	return outcome{}
}

// validate is stage 8: SOM 1.0, every violation reported.
func validate(r *request) outcome {
	refusals, warnings := som.Validate(r.msg)
	r.warnings = warnings
	return refused(refusals...)
}

// grants is stage 9: the connection's publish grant, decided by the
// workspace policy.
func (s *Server) grants(r *request) outcome {
	if s.opts.WithoutPolicy {
		return outcome{}
	}
	refusal, err := r.ws.policy.Grants(r.c.Request.Context(), messageInput(r))
	if err != nil {
		s.log.ErrorContext(r.c.Request.Context(), "policy evaluation failed", "workspace", r.ws.id, "stage", "grants", "error", err)
		r.retry = time.Second
		return refused(rules.New(rules.BusUnavailable, "internal error; retry with the same message_id and body", ""))
	}
	if refusal != nil {
		return refused(*refusal)
	}
	return outcome{}
}

func messageInput(r *request) policy.MessageInput {
	return policy.MessageInput{
		Connection: r.conn.Name, MessageType: r.msg.MessageType, Family: r.msg.Family,
		SystemID: r.msg.SystemID, StoryID: r.msg.StoryID, Doc: r.msg.Doc,
	}
}

// workspacePolicy is stage 12 for the publish core: ownership and the
// workspace's own rules, decided by the workspace policy over the story head.
func (s *Server) workspacePolicy(ctx context.Context, r *request) publish.PolicyFunc {
	if s.opts.WithoutPolicy {
		return nil
	}
	in := messageInput(r)
	return func(head publish.Head) publish.Decision {
		d, err := r.ws.policy.Publish(ctx, in, policy.HeadInput{
			Exists: head.Exists, Owner: head.Owner, SequenceNumber: head.SequenceNumber, State: head.State,
		})
		if errors.Is(err, policy.ErrTimeout) {
			s.log.WarnContext(ctx, "workspace policy timed out", "workspace", r.ws.id, "messageID", r.msg.MessageID, "error", err)
			v := rules.New(rules.PolicyTimeout, "the workspace's policy did not decide in time; retry with the same message_id and body", "")
			return publish.Decision{Refusal: &v, Owner: head.Owner}
		}
		if errors.Is(err, policy.ErrBusy) {
			s.log.WarnContext(ctx, "workspace policy busy", "workspace", r.ws.id, "messageID", r.msg.MessageID)
			v := rules.New(rules.PolicyBusy, "the workspace's policy is deciding as many messages as it may at once; retry with the same message_id and body", "")
			return publish.Decision{Refusal: &v, Owner: head.Owner}
		}
		if err != nil {
			s.log.ErrorContext(ctx, "policy evaluation failed", "workspace", r.ws.id, "stage", "workspace policy", "error", err)
			v := rules.New(rules.BusUnavailable, "internal error; retry with the same message_id and body", "")
			return publish.Decision{Refusal: &v, Owner: head.Owner}
		}
		out := publish.Decision{Owner: d.Owner, Warnings: d.Warnings}
		if len(d.Refusals) > 0 {
			out.Refusal = &d.Refusals[0]
		}
		return out
	}
}

func busUnavailable(c *gin.Context) {
	refuse(c, time.Second, rules.New(rules.BusUnavailable, "internal error; retry with the same message_id and body", ""))
}
