package bus

// The consumer routes of SPEC §7: HTTP pull delivery of the workspace's
// topic, one JetStream durable pull consumer per (workspace, consumer name),
// with long-polling, explicit acknowledgements and redelivery after the ack
// timeout. The consumers' life cycle is store.Consumers'; the wire forms
// are in consume_wire.go.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// Bounds of a pull request.
const (
	// DefaultConsumeMax is the number of messages a pull returns at most
	// when it names no max.
	DefaultConsumeMax = 10
	// MaxConsumeMax is the largest max a pull may ask for.
	MaxConsumeMax = 100
	// MaxConsumeWait is the longest a pull may wait for a first message,
	// well inside the API server's write timeout.
	MaxConsumeWait = 20 * time.Second
	// MaxAckIDs is the most ack_ids one acknowledgement may carry.
	MaxAckIDs = 1000
)

// consumerName is what a consumer name may be: a valid JetStream durable
// name and a single URL path segment.
var consumerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// families are SOM 1.0's families, the families a consumer can ask for.
var families = []string{som.FamilyStoryContext, som.FamilyStoryEvent, som.FamilyAssetReference}

// consumeRequest is one request to a consumer route as it passes the
// stages: the publish request's authentication, then its own.
type consumeRequest struct {
	request
	name     string
	families []string // the families asked for; nil when none were named
	max      int
	wait     time.Duration
}

// pullStages are the pull route's stages: it has no body, so no size and
// no body stage; then its gate, which counts the request rate alone.
func (s *Server) pullStages() []stage {
	return []stage{
		{"authentication", s.authenticate},
		{"connection, firewall and limits", s.pullGate},
	}
}

// ackStages are the ack route's stages: its body is read once the request
// is authenticated, as a publish's is; then its gate, which counts the
// request rate alone.
func (s *Server) ackStages() []stage {
	return []stage{
		{"size", declaredSize},
		{"authentication", s.authenticate},
		{"body", s.readBody},
		{"connection, firewall and limits", s.ackGate},
	}
}

// consumerStart runs a consumer route's stages, then checks the consumer
// name.
func (s *Server) consumerStart(c *gin.Context, stages []stage) (*consumeRequest, bool) {
	ws, ok := s.workspace(c.Param("tenant"))
	if !ok {
		missingAuthenticationToken(c)
		return nil, false
	}
	r := &consumeRequest{request: request{c: c, ws: ws, cfg: ws.cfg.Load()}, name: c.Param("name")}
	if !s.runStages(&r.request, stages) {
		return nil, false
	}
	if !consumerName.MatchString(r.name) {
		refuse(c, 0, rules.New(rules.ConsumerRequestInvalid, "a consumer name is 1 to 64 letters, digits, '-' or '_'", ""))
		return nil, false
	}
	return r, true
}

// ref names the request's durable consumer.
func (r *consumeRequest) ref() store.ConsumerRef {
	return store.ConsumerRef{Workspace: r.ws.id, Name: r.name, Connection: r.conn.Name}
}

// consume handles GET /v1/tenants/{t}/consumers/{name}/messages: a
// long-poll for the consumer's next messages.
func (s *Server) consume(c *gin.Context) {
	r, ok := s.consumerStart(c, s.pipelines.pull)
	if !ok {
		return
	}
	if v := r.parseQuery(); v != nil {
		refuse(c, 0, *v)
		return
	}
	ctx := c.Request.Context()
	granted, err := r.ws.policy.Families(ctx, r.conn.Name)
	if err != nil {
		s.log.ErrorContext(ctx, "policy evaluation failed", "workspace", r.ws.id, "stage", "grants", "error", err)
		busUnavailable(c)
		return
	}
	filters, v := r.filters(granted)
	if v != nil {
		refuse(c, 0, *v)
		return
	}
	cons, err := s.consumers.Open(ctx, r.ref(), filters)
	if err != nil {
		s.consumerFailed(c, r, "open consumer", err)
		return
	}
	msgs, err := s.consumers.Pull(ctx, cons, r.max, r.wait)
	if err != nil && len(msgs) == 0 {
		s.consumerFailed(c, r, "pull", err)
		return
	}
	out := make([]Delivery, 0, len(msgs))
	for _, m := range msgs {
		d, ok := delivery(m, ackKey(r.cfg))
		if !ok {
			// Not a message the bus published: never hand it out again.
			s.log.WarnContext(ctx, "terminating a topic message that is not a SOM message", "workspace", r.ws.id, "consumer", r.name, "subject", m.Subject())
			_ = m.Term()
			continue
		}
		out = append(out, d)
	}
	s.metrics.delivered.WithLabelValues(r.ws.id, r.conn.Name).Add(float64(len(out)))
	writeDeliveries(c, out)
}

// parseQuery reads max, wait and family from the query string.
func (r *consumeRequest) parseQuery() *rules.Violation {
	q := r.c.Request.URL.Query()
	bad := func(msg string) *rules.Violation {
		v := rules.New(rules.ConsumerRequestInvalid, msg, "")
		return &v
	}
	r.max = DefaultConsumeMax
	if s := q.Get("max"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxConsumeMax {
			return bad("max must be a whole number from 1 to " + strconv.Itoa(MaxConsumeMax) + ", not " + strconv.Quote(s))
		}
		r.max = n
	}
	if s := q.Get("wait"); s != "" {
		d, err := parseWait(s)
		if err != nil || d < 0 || d > MaxConsumeWait {
			return bad("wait must be a duration from 0s to " + MaxConsumeWait.String() + " (\"5s\", \"500ms\" or whole seconds), not " + strconv.Quote(s))
		}
		r.wait = d
	}
	for _, list := range q["family"] {
		for f := range strings.SplitSeq(list, ",") {
			f = strings.TrimSpace(f)
			if !slices.Contains(families, f) {
				return bad("unknown family " + strconv.Quote(f) + "; the families are " + strings.Join(families, ", "))
			}
			if !slices.Contains(r.families, f) {
				r.families = append(r.families, f)
			}
		}
	}
	return nil
}

// filters returns the consumer's filter subjects: the families asked for,
// or every family the connection may consume (granted, "*" for all). Every
// family asked for must be granted.
func (r *consumeRequest) filters(granted []string) ([]string, *rules.Violation) {
	refuse := func(msg string) ([]string, *rules.Violation) {
		v := rules.New(rules.GrantFamily, msg, "")
		return nil, &v
	}
	all := slices.Contains(granted, "*")
	if !all && len(granted) == 0 {
		return refuse("connection " + r.conn.Name + " may consume no family")
	}
	prefix := "som." + r.ws.id + "."
	if len(r.families) == 0 {
		if all {
			return []string{prefix + ">"}, nil
		}
		var out []string
		for _, f := range families {
			if slices.Contains(granted, f) {
				out = append(out, prefix+f+".>")
			}
		}
		if len(out) == 0 {
			return refuse("connection " + r.conn.Name + " may consume no family of SOM 1.0")
		}
		return out, nil
	}
	out := make([]string, 0, len(r.families))
	for _, f := range r.families {
		if !all && !slices.Contains(granted, f) {
			return refuse("connection " + r.conn.Name + " may not consume " + f)
		}
		out = append(out, prefix+f+".>")
	}
	slices.Sort(out)
	return out, nil
}

// ack handles POST /v1/tenants/{t}/consumers/{name}/acks.
func (s *Server) ack(c *gin.Context) {
	r, ok := s.consumerStart(c, s.pipelines.ack)
	if !ok {
		return
	}
	var req AckRequest
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || dec.More() || len(req.AckIDs) == 0 || len(req.AckIDs) > MaxAckIDs {
		refuse(c, 0, rules.New(rules.ConsumerRequestInvalid, `send {"ack_ids":[…]} with 1 to `+strconv.Itoa(MaxAckIDs)+` ack_ids`, ""))
		return
	}
	payload, action, ok := req.ackPayload()
	if !ok {
		refuse(c, 0, rules.New(rules.ConsumerRequestInvalid, `action is ack (the default), nak, in_progress or term; only nak takes a delay, from 0s to `+MaxNakDelay.String(), "/action"))
		return
	}
	subjects := make([]string, len(req.AckIDs))
	key := ackKey(r.cfg)
	for i, id := range req.AckIDs {
		subj, ok := ackSubject(key, r.ws.id, r.name, id)
		if !ok {
			refuse(c, 0, rules.New(rules.ConsumerAckInvalid, "this ack_id was not issued to consumer "+r.name+"; nothing was acknowledged", "/ack_ids/"+strconv.Itoa(i)))
			return
		}
		subjects[i] = subj
	}
	ctx := c.Request.Context()
	if _, err := s.consumers.Find(ctx, r.ref()); err != nil {
		s.consumerFailed(c, r, "open consumer", err)
		return
	}
	if failed, err := s.consumers.Ack(ctx, subjects, payload); err != nil {
		// One line for the request, however many of its ids failed.
		s.consumerFailed(c, r, "ack", fmt.Errorf("%d of %d acknowledgements unconfirmed, the first: %w", failed, len(subjects), err))
		return
	}
	s.metrics.acked.WithLabelValues(r.ws.id, r.conn.Name, action).Add(float64(len(subjects)))
	res := AckResponse{Acked: len(subjects)}
	if action != AckActionAck {
		res.Action = action
	}
	writeJSON(c, http.StatusOK, res)
}

// consumerFailed answers a request whose consumer operation op failed: the
// refusals the store's consumers decide (a name taken, the connection's
// limit, a consumer that does not exist), or for any other error a log
// line and the generic 503.
func (s *Server) consumerFailed(c *gin.Context, r *consumeRequest, op string, err error) {
	if limit, ok := errors.AsType[*store.ConsumerLimitError](err); ok {
		refuse(c, 0, rules.New(rules.ConsumerLimitReached, fmt.Sprintf(
			"connection %s has %d durable consumers, the most it may have; use one of them, or wait until an idle one is removed", limit.Connection, limit.Limit), ""))
		return
	}
	switch {
	case errors.Is(err, store.ErrConsumerNameTaken):
		refuse(c, 0, rules.New(rules.ConsumerNameTaken, "consumer name "+r.name+" belongs to another connection or was not created by the HTTP API", ""))
	case errors.Is(err, store.ErrConsumerNotFound):
		refuse(c, 0, rules.New(rules.ConsumerAckInvalid, "consumer "+r.name+" does not exist; nothing was acknowledged", ""))
	default:
		s.log.ErrorContext(c.Request.Context(), "consumer store operation failed", "workspace", r.ws.id, "consumer", r.name, "op", op, "error", err)
		busUnavailable(c)
	}
}
