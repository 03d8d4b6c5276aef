package bus

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/bus/config"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/rules"
	"github.com/storybus/storybus/bus/som"
)

// ctxRule is the gin context key under which an answer's rule is kept for
// metrics.
const ctxRule = "storybus.rule"

// request is one publish request as it passes the stages.
type request struct {
	c     *gin.Context
	ws    *workspace
	cfg   *config.Workspace
	body  []byte
	conn  *config.Connection
	msg   *som.Message
	retry time.Duration
	// warnings are SOM's warnings (stage 8), reported when accepted.
	warnings []rules.Violation
}

// stage is one step of the publish pipeline; a non-empty result refuses the
// request with those violations.
type stage struct {
	name string
	run  func(*request) []rules.Violation
}

// stages returns the pipeline of SPEC §3.2 up to grants (stage 9); the
// publish core runs stages 10 to 13.
func (s *Server) stages() []stage {
	return []stage{
		{"size", s.readBody},
		{"authentication", s.authenticate},
		{"connection", connectionActive},
		{"parse", parse},
		{"som", validate},
		{"grants", grants},
	}
}

func one(v rules.Violation) []rules.Violation { return []rules.Violation{v} }

// publish handles POST /v1/tenants/{t}/messages.
func (s *Server) publish(c *gin.Context) {
	ws, ok := s.workspace(c.Param("tenant"))
	if !ok {
		missingAuthenticationToken(c)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.RequestTimeout)
	defer cancel()
	req := &request{c: c, ws: ws, cfg: ws.cfg.Load()}
	for _, st := range s.stages() {
		if vs := st.run(req); len(vs) > 0 {
			refuse(c, req.retry, vs...)
			return
		}
	}
	hash, err := req.msg.ContentHash()
	if err != nil { // Parse already refused what cannot be canonicalised
		refuse(c, 0, rules.New(rules.MessageNotJSON, "the message cannot be canonicalised: "+err.Error(), ""))
		return
	}
	out := ws.core.Publish(ctx, publish.Input{
		Msg:      req.msg,
		Hash:     hash,
		Warnings: req.warnings,
		Policy:   ownership(req.cfg, req.msg),
	})
	switch {
	case out.Abandoned:
		panic(http.ErrAbortHandler)
	case out.Refusal != nil:
		refuse(c, out.RetryAfter, *out.Refusal)
	case out.Duplicate:
		writeJSON(c, http.StatusOK, Duplicate{Accepted: true, Duplicate: true, MessageID: req.msg.MessageID})
	default:
		tolerated := out.Tolerated
		if tolerated == nil {
			tolerated = []rules.Violation{}
		}
		writeJSON(c, http.StatusAccepted, Accepted{
			Accepted: true, MessageID: req.msg.MessageID, MessageType: req.msg.MessageType,
			Family: req.msg.Family, Tolerated: tolerated,
		})
	}
}

// observePublish counts every publish answer by workspace, status and rule.
// It runs outside the panic recovery, so it sees the 503 a panic becomes;
// an abandoned request (no answer) is counted with status "aborted".
func (s *Server) observePublish(c *gin.Context) {
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
		s.metrics.observeRequest(ws, status, r, time.Since(start))
	}()
	c.Next()
}

// readBody is stage 2: the body, read bounded, never whole into memory
// before its size is known.
func (s *Server) readBody(r *request) []rules.Violation {
	tooLarge := one(rules.New(rules.MessageTooLarge, "the body is over 240,000 bytes", ""))
	if r.c.Request.ContentLength > MaxBodyBytes {
		return tooLarge
	}
	size := MaxBodyBytes + 1
	if n := r.c.Request.ContentLength; n >= 0 {
		size = int(n) + 1
	}
	body, err := io.ReadAll(io.LimitReader(r.c.Request.Body, int64(size)))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr) || len(body) > MaxBodyBytes:
		return tooLarge
	case err != nil:
		return one(rules.New(rules.MessageNotJSON, "the body could not be read: "+err.Error(), ""))
	}
	r.body = body
	return nil
}

// authenticate is stage 3: the bearer token.
func (s *Server) authenticate(r *request) []rules.Violation {
	scheme, token, ok := strings.Cut(r.c.GetHeader("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return one(rules.New(rules.AuthTokenMissing, "send Authorization: Bearer <token>", ""))
	}
	now := s.opts.Clock.Now()
	claims, cfg, rule := s.verifyToken(r, token, now)
	if rule != "" {
		return one(rules.New(rule, tokenMessages[rule], ""))
	}
	if claims.Workspace() != r.ws.id {
		return one(rules.New(rules.WorkspaceMismatch, "the token was issued for workspace "+claims.Workspace(), ""))
	}
	r.conn, _ = cfg.Connection(claims.Connection())
	return nil
}

// verifiedToken is a token that passed verification against cfg.
type verifiedToken struct {
	claims  *auth.Claims
	cfg     *config.Workspace
	expires time.Time
}

// maxCachedTokens bounds the verified-token cache; producers reuse a token
// for its lifetime, so the cache holds about one per connection.
const maxCachedTokens = 10_000

// verifyToken verifies a bearer token, remembering the result until the
// token expires or its workspace's configuration changes (a rotation, a
// deactivation), so a producer's token is parsed once, not per request.
func (s *Server) verifyToken(r *request, token string, now time.Time) (*auth.Claims, *config.Workspace, string) {
	if v, ok := s.tokens.Load(token); ok {
		vt := v.(*verifiedToken)
		if ws, served := s.workspace(vt.claims.Workspace()); served && ws.cfg.Load() == vt.cfg && now.Before(vt.expires) {
			return vt.claims, vt.cfg, ""
		}
		s.tokens.Delete(token)
	}
	cfg := r.cfg
	peek, ok := auth.Peek(token)
	if ok && peek.Workspace() != r.ws.id {
		// A token of another workspace this bus serves is verified with
		// that workspace's key, so that stage 4 can say workspace.mismatch.
		other, served := s.workspace(peek.Workspace())
		if !served {
			return nil, nil, rules.AuthTokenInvalid
		}
		cfg = other.cfg.Load()
	}
	claims, rule := auth.Verify(cfg, token, now)
	if rule != "" {
		return nil, nil, rule
	}
	if s.tokenCount.Add(1) > maxCachedTokens {
		s.tokens.Clear()
		s.tokenCount.Store(0)
	}
	s.tokens.Store(token, &verifiedToken{claims: claims, cfg: cfg, expires: claims.ExpiresAt.Time})
	return claims, cfg, ""
}

var tokenMessages = map[string]string{
	rules.AuthTokenInvalid: "the token is malformed or badly signed",
	rules.AuthTokenExpired: "the token has expired",
	rules.AuthTokenRevoked: "the token was issued before the connection's last secret rotation",
}

// connectionActive is stage 4: the connection may publish.
func connectionActive(r *request) []rules.Violation {
	if !r.conn.IsActive() {
		return one(rules.New(rules.ConnectionInactive, "connection "+r.conn.Name+" is not active", ""))
	}
	return nil
}

// parse is stage 7: one JSON object.
func parse(r *request) []rules.Violation {
	if ct := r.c.GetHeader("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
			return one(rules.New(rules.MessageNotJSON, "Content-Type must be application/json, not "+strconv.Quote(ct), ""))
		}
	}
	msg, err := som.Parse(r.body)
	if err != nil {
		path := ""
		if pe, ok := errors.AsType[*som.ParseError](err); ok {
			path = pe.Path
		}
		return one(rules.New(rules.MessageNotJSON, err.Error(), path))
	}
	r.msg = msg
	return nil
}

// validate is stage 8: SOM 1.0, every violation reported.
func validate(r *request) []rules.Violation {
	refusals, warnings := som.Validate(r.msg)
	r.warnings = warnings
	return refusals
}

// grants is stage 9: the connection's publish grant.
func grants(r *request) []rules.Violation {
	g := r.conn.Grant.Publish
	if !granted(g.SystemIDs, r.msg.SystemID) {
		return one(rules.New(rules.GrantSystemID, "connection "+r.conn.Name+" may not publish as system_id "+strconv.Quote(r.msg.SystemID), "/system_id"))
	}
	if !granted(g.MessageTypes, r.msg.MessageType) {
		return one(rules.New(rules.GrantMessageType, "connection "+r.conn.Name+" may not publish "+r.msg.MessageType, "/message_type"))
	}
	return nil
}

func granted(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

// ownership is stage 12 for snapshots: a story's owner is its hand-off
// target, else the system an owner rule assigns, else the system of its
// first accepted snapshot. A snapshot from another system is a warning
// under "tolerate" and refused under "refuse".
func ownership(cfg *config.Workspace, msg *som.Message) publish.PolicyFunc {
	return func(head publish.Head) publish.Decision {
		if msg.Family != publish.FamilyStoryContext {
			return publish.Decision{}
		}
		owner := head.Owner
		for _, o := range cfg.Ownership.Owners {
			if ok, _ := regexp.MatchString("^(?:"+o.StoryIDPattern+")$", msg.StoryID); ok {
				owner = o.SystemID
				break
			}
		}
		for _, h := range cfg.Ownership.Handoffs {
			if h.StoryID == msg.StoryID {
				owner = h.ToSystemID
			}
		}
		if owner == "" {
			owner = msg.SystemID
		}
		d := publish.Decision{Owner: owner}
		if owner != msg.SystemID {
			v := rules.New(rules.StoryNotOwner, "story "+msg.StoryID+" is owned by "+owner+", not "+msg.SystemID, "/system_id")
			if cfg.Ownership.NotOwner == config.NotOwnerRefuse {
				d.Refusal = &v
			} else {
				d.Warnings = []rules.Violation{v}
			}
		}
		return d
	}
}

func busUnavailable(c *gin.Context) {
	refuse(c, time.Second, rules.New(rules.BusUnavailable, "internal error; retry with the same message_id and body", ""))
}
