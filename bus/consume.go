package bus

// The consumer routes of SPEC §7: HTTP pull delivery of the workspace's
// topic, one JetStream durable pull consumer per (workspace, consumer name),
// with long-polling, explicit acknowledgements and redelivery after the ack
// timeout.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/config"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/rules"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
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
	// ConsumerAckWait is how long a delivered message may stay
	// unacknowledged before it is delivered again.
	ConsumerAckWait = 30 * time.Second
)

// minConsumeWait is the shortest wait of a pull that waits at all.
const minConsumeWait = 100 * time.Millisecond

// ConsumerMetadataConnection is the durable consumer's metadata key naming
// the connection that owns it.
const ConsumerMetadataConnection = "storybus-connection"

// consumerAckWait is ConsumerAckWait, shortened by tests that wait for a
// redelivery.
var consumerAckWait = ConsumerAckWait

// ackTimeout bounds the store's confirmation of one acknowledgement.
const ackTimeout = 5 * time.Second

// ConsumerLimits bound the durable consumers the consumer routes create.
type ConsumerLimits struct {
	// PerConnection is the most durable consumers one connection may have
	// on a workspace's topic; a pull that would create one more is refused
	// with 403 consumer.limit_reached. 0 means no limit.
	PerConnection int
	// InactiveThreshold is how long a durable consumer may go without a
	// pull or an acknowledgement before JetStream removes it, with its
	// position; a later pull under its name creates it again, from the
	// start of the topic. 0 never removes one.
	InactiveThreshold time.Duration
}

// DefaultConsumerLimits are the consumer limits a server has unless told
// otherwise: ten consumers per connection, removed after a week idle (the
// idempotency window: a consumer back within it loses nothing).
var DefaultConsumerLimits = ConsumerLimits{PerConnection: 10, InactiveThreshold: 7 * 24 * time.Hour}

// consumerName is what a consumer name may be: a valid JetStream durable
// name and a single URL path segment.
var consumerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// families are SOM 1.0's families, the families a consumer can ask for.
var families = []string{som.FamilyStoryContext, som.FamilyStoryEvent, som.FamilyAssetReference}

// Delivery is one message of a pull answer. Message is the SOM message
// exactly as it was accepted.
type Delivery struct {
	MessageID   string `json:"message_id"`
	MessageType string `json:"message_type"`
	Family      string `json:"family"`
	AckID       string `json:"ack_id"`
	Delivery    uint64 `json:"delivery"`
	// Traceparent and Tracestate are the W3C trace context the message
	// was published in, when its request had one: a consumer continues
	// that trace.
	Traceparent string          `json:"traceparent,omitempty"`
	Tracestate  string          `json:"tracestate,omitempty"`
	Message     json.RawMessage `json:"message"`
}

// AckRequest is the body of POST …/consumers/{name}/acks.
type AckRequest struct {
	AckIDs []string `json:"ack_ids"`
	// Action is what to do with the deliveries: AckActionAck (the
	// default), AckActionNak, AckActionInProgress or AckActionTerm.
	Action string `json:"action,omitempty"`
	// Delay is how long a nak waits before the redelivery (a Go duration
	// or whole seconds, at most MaxNakDelay); none redelivers at once.
	Delay string `json:"delay,omitempty"`
}

// The actions of an acknowledgement.
const (
	// AckActionAck: handled, never deliver again.
	AckActionAck = "ack"
	// AckActionNak: not handled, deliver again (after Delay).
	AckActionNak = "nak"
	// AckActionInProgress: still being handled; the ack timeout starts
	// again.
	AckActionInProgress = "in_progress"
	// AckActionTerm: never deliver again, without having handled it (a
	// message the consumer can never handle).
	AckActionTerm = "term"
)

// MaxNakDelay is the longest redelivery delay a nak may ask for.
const MaxNakDelay = time.Hour

// AckResponse answers an acknowledgement.
type AckResponse struct {
	// Acked is how many ack_ids the action was applied to.
	Acked int `json:"acked"`
	// Action is the action applied, when it was not a plain ack.
	Action string `json:"action,omitempty"`
}

// ackPayload returns the JetStream acknowledgement body of an action.
func (r AckRequest) ackPayload() ([]byte, string, bool) {
	switch r.Action {
	case "", AckActionAck:
		return []byte("+ACK"), AckActionAck, r.Delay == ""
	case AckActionNak:
		if r.Delay == "" {
			return []byte("-NAK"), AckActionNak, true
		}
		d, err := parseWait(r.Delay)
		if err != nil || d < 0 || d > MaxNakDelay {
			return nil, "", false
		}
		return fmt.Appendf(nil, `-NAK {"delay":%d}`, d.Nanoseconds()), AckActionNak, true
	case AckActionInProgress:
		return []byte("+WPI"), AckActionInProgress, r.Delay == ""
	case AckActionTerm:
		return []byte("+TERM"), AckActionTerm, r.Delay == ""
	}
	return nil, "", false
}

// consumeRequest is one request to a consumer route as it passes the
// stages: the publish request's authentication, then its own.
type consumeRequest struct {
	request
	name     string
	families []string // the families asked for; nil when none were named
	max      int
	wait     time.Duration
}

// consumerStart runs the stages both consumer routes share with
// publishing: the route, the size of a body (acks), authentication, and the
// connection, firewall and limits; then it checks the consumer name.
func (s *Server) consumerStart(c *gin.Context, withBody bool) (*consumeRequest, bool) {
	ws, ok := s.workspace(c.Param("tenant"))
	if !ok {
		missingAuthenticationToken(c)
		return nil, false
	}
	// A consumer request accepts no message, so it takes no slot of the
	// daily quota: only the request rate applies.
	r := &consumeRequest{request: request{c: c, ws: ws, cfg: ws.cfg.Load(), rateOnly: true}, name: c.Param("name")}
	stages := []stage{{"authentication", s.authenticate}, {"connection, firewall and limits", s.gate}}
	if withBody {
		stages = append(s.bodyAfterToken(s.authenticate), stages[1:]...)
	} else if c.GetHeader("Content-Type") == "" {
		// A pull has no body: the firewall's content types, which are
		// about bodies, judge it as the JSON it answers with.
		r.contentType = &contentType{mediaType: "application/json"}
	}
	if !s.runStages(&r.request, stages) {
		return nil, false
	}
	if !consumerName.MatchString(r.name) {
		refuse(c, 0, rules.New(rules.ConsumerRequestInvalid, "a consumer name is 1 to 64 letters, digits, '-' or '_'", ""))
		return nil, false
	}
	return r, true
}

// consume handles GET /v1/tenants/{t}/consumers/{name}/messages: a
// long-poll for the consumer's next messages.
func (s *Server) consume(c *gin.Context) {
	r, ok := s.consumerStart(c, false)
	if !ok {
		return
	}
	if v := r.parseQuery(); v != nil {
		refuse(c, 0, *v)
		return
	}
	granted, err := r.ws.policy.Families(c.Request.Context(), r.conn.Name)
	if err != nil {
		s.log.ErrorContext(c.Request.Context(), "policy evaluation failed", "workspace", r.ws.id, "stage", "grants", "error", err)
		busUnavailable(c)
		return
	}
	filters, v := r.filters(granted)
	if v != nil {
		refuse(c, 0, *v)
		return
	}
	cons, ok := s.openDurable(c, r, filters, true)
	if !ok {
		return
	}
	msgs, err := pull(c.Request.Context(), cons, r.max, r.wait)
	if err != nil && len(msgs) == 0 {
		s.consumerUnavailable(c, r, "pull", err)
		return
	}
	out := make([]Delivery, 0, len(msgs))
	for _, m := range msgs {
		d, ok := delivery(m, ackKey(r.cfg))
		if !ok {
			// Not a message the bus published: never hand it out again.
			s.log.WarnContext(c.Request.Context(), "terminating a topic message that is not a SOM message", "workspace", r.ws.id, "consumer", r.name, "subject", m.Subject())
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

// parseWait reads a Go duration, or whole seconds (at most a day, so that
// the conversion cannot overflow).
func parseWait(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 || n > 86_400 {
			return 0, errors.New("out of range")
		}
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(s)
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

// openDurable is durable for a handler: on a refusal or a store failure it
// answers the request and returns false.
func (s *Server) openDurable(c *gin.Context, r *consumeRequest, filters []string, create bool) (jetstream.Consumer, bool) {
	cons, v, err := s.durable(c.Request.Context(), r, filters, create)
	switch {
	case err != nil:
		s.consumerUnavailable(c, r, "open consumer", err)
		return nil, false
	case v != nil:
		refuse(c, 0, *v)
		return nil, false
	}
	return cons, true
}

// durable returns the workspace's durable pull consumer of the request's
// name, creating it on first use and moving its filter to filters when they
// differ. A name owned by another connection is refused. With create
// false, a consumer that does not exist is refused as an invalid ack.
func (s *Server) durable(ctx context.Context, r *consumeRequest, filters []string, create bool) (jetstream.Consumer, *rules.Violation, error) {
	js := s.opts.Store.JS
	stream := store.StreamName(r.ws.id)
	cfg := jetstream.ConsumerConfig{
		Durable:        r.name,
		Description:    "storybus HTTP pull consumer of connection " + r.conn.Name,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        consumerAckWait,
		FilterSubjects: filters,
		Metadata:       map[string]string{ConsumerMetadataConnection: r.conn.Name},
		// An abandoned consumer goes by itself: names cannot pile up.
		InactiveThreshold: s.consumers.InactiveThreshold,
	}
	for try := 0; ; try++ {
		cons, err := js.Consumer(ctx, stream, r.name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			if !create {
				v := rules.New(rules.ConsumerAckInvalid, "consumer "+r.name+" does not exist; nothing was acknowledged", "")
				return nil, &v, nil
			}
			if v, err := s.consumerLimit(ctx, r, ""); v != nil || err != nil {
				return nil, v, err
			}
			cons, err = js.CreateConsumer(ctx, stream, cfg)
			if (errors.Is(err, jetstream.ErrConsumerExists) || errors.Is(err, jetstream.ErrConsumerNameAlreadyInUse)) && try == 0 {
				continue // created concurrently: check the other one's owner
			}
			if err != nil {
				return nil, nil, err
			}
			// Creations racing on other names, here or on another
			// replica, all passed the check: the oldest stay.
			if v, err := s.consumerLimit(ctx, r, r.name); v != nil || err != nil {
				if derr := js.DeleteConsumer(ctx, stream, r.name); derr != nil && !errors.Is(derr, jetstream.ErrConsumerNotFound) {
					err = errors.Join(err, derr)
				}
				return nil, v, err
			}
			s.log.InfoContext(ctx, "created consumer", "workspace", r.ws.id, "consumer", r.name, "connection", r.conn.Name)
		}
		if err != nil {
			return nil, nil, err
		}
		info := cons.CachedInfo()
		if owner := info.Config.Metadata[ConsumerMetadataConnection]; owner != r.conn.Name {
			v := rules.New(rules.ConsumerNameTaken, "consumer name "+r.name+" belongs to another connection or was not created by the HTTP API", "")
			return nil, &v, nil
		}
		refilter := filters != nil && !sameFilters(info.Config, filters)
		if !refilter && info.Config.InactiveThreshold == cfg.InactiveThreshold {
			return cons, nil, nil
		}
		// The families asked for, the grant, or the inactivity threshold
		// changed.
		upd := info.Config
		upd.InactiveThreshold = cfg.InactiveThreshold
		if refilter {
			upd.FilterSubject = ""
			upd.FilterSubjects = filters
		}
		cons, err = js.UpdateConsumer(ctx, stream, upd)
		if err != nil {
			return nil, nil, err
		}
		s.log.InfoContext(ctx, "changed consumer", "workspace", r.ws.id, "consumer", r.name, "filters", strings.Join(upd.FilterSubjects, " "), "inactiveThreshold", upd.InactiveThreshold)
		return cons, nil, nil
	}
}

// consumerLimit checks the connection's count of durable consumers on
// the topic against ConsumerLimits.PerConnection. Before a creation (mine
// empty) it refuses when the connection has them all; after one, it
// refuses when consumer mine is not among the connection's oldest, so
// that of creations racing past the first check only the earliest stay.
func (s *Server) consumerLimit(ctx context.Context, r *consumeRequest, mine string) (*rules.Violation, error) {
	limit := s.consumers.PerConnection
	if limit <= 0 {
		return nil, nil
	}
	type owned struct {
		name    string
		created time.Time
	}
	var have []owned
	topic, err := s.opts.Store.JS.Stream(ctx, store.StreamName(r.ws.id))
	if err != nil {
		return nil, err
	}
	list := topic.ListConsumers(ctx)
	for info := range list.Info() {
		if info.Config.Metadata[ConsumerMetadataConnection] == r.conn.Name {
			have = append(have, owned{info.Name, info.Created})
		}
	}
	if err := list.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(have, func(a, b owned) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	over := len(have) >= limit
	if mine != "" {
		over = !slices.ContainsFunc(have[:min(limit, len(have))], func(o owned) bool { return o.name == mine })
	}
	if !over {
		return nil, nil
	}
	v := rules.New(rules.ConsumerLimitReached, fmt.Sprintf(
		"connection %s has %d durable consumers, the most it may have; use one of them, or wait until an idle one is removed", r.conn.Name, limit), "")
	return &v, nil
}

func sameFilters(cfg jetstream.ConsumerConfig, want []string) bool {
	have := slices.Clone(cfg.FilterSubjects)
	if cfg.FilterSubject != "" {
		have = append(have, cfg.FilterSubject)
	}
	slices.Sort(have)
	return slices.Equal(have, want)
}

// pull returns up to limit of the consumer's next messages. It returns as
// soon as one message is there, with whatever else is there at that
// moment, or empty-handed after wait.
func pull(ctx context.Context, cons jetstream.Consumer, limit int, wait time.Duration) ([]jetstream.Msg, error) {
	var first jetstream.MessageBatch
	var err error
	if wait <= 0 {
		first, err = cons.FetchNoWait(limit)
	} else {
		// A wait shorter than the store's round trip would expire before
		// the pull is sent.
		wctx, cancel := context.WithTimeout(ctx, max(wait, minConsumeWait))
		defer cancel()
		first, err = cons.Fetch(1, jetstream.FetchContext(wctx))
	}
	if err != nil {
		return nil, err
	}
	msgs, err := drain(first)
	if err != nil || len(msgs) == 0 || len(msgs) >= limit || wait <= 0 {
		return msgs, ignoreEnd(err)
	}
	rest, err := cons.FetchNoWait(limit - len(msgs))
	if err != nil {
		return msgs, err
	}
	more, err := drain(rest)
	return append(msgs, more...), ignoreEnd(err)
}

func drain(b jetstream.MessageBatch) ([]jetstream.Msg, error) {
	var msgs []jetstream.Msg
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	return msgs, b.Error()
}

// ignoreEnd drops the errors that only say a long-poll ended.
func ignoreEnd(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrTimeout) {
		return nil
	}
	return err
}

// delivery turns a topic message into the answer's form, its ack id
// signed with key.
func delivery(m jetstream.Msg, key []byte) (Delivery, bool) {
	meta, err := m.Metadata()
	raw := m.Data()
	if err != nil || !json.Valid(raw) {
		return Delivery{}, false
	}
	tokens := strings.Split(m.Subject(), ".")
	if len(tokens) < 3 {
		return Delivery{}, false
	}
	family := tokens[2]
	typ := m.Headers().Get(publish.HeaderMessageType)
	if typ == "" {
		typ = strings.Replace(family, "-", ".", 1)
	}
	return Delivery{
		MessageID:   m.Headers().Get(nats.MsgIdHdr),
		MessageType: typ,
		Family:      family,
		AckID:       signAckID(key, m.Reply()),
		Delivery:    meta.NumDelivered,
		Traceparent: m.Headers().Get(traceparentHeader),
		Tracestate:  m.Headers().Get(tracestateHeader),
		Message:     raw,
	}, true
}

// deliveryHead is a Delivery without its message.
type deliveryHead struct {
	MessageID   string `json:"message_id"`
	MessageType string `json:"message_type"`
	Family      string `json:"family"`
	AckID       string `json:"ack_id"`
	Delivery    uint64 `json:"delivery"`
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// The headers of a topic message that hold the trace context it was
// published in.
const (
	traceparentHeader = "traceparent"
	tracestateHeader  = "tracestate"
)

// writeDeliveries answers a pull. The messages are written byte for byte
// as accepted, which encoding a json.RawMessage would not do (it compacts).
func writeDeliveries(c *gin.Context, ds []Delivery) {
	var buf bytes.Buffer
	buf.WriteString(`{"messages":[`)
	for i, d := range ds {
		if i > 0 {
			buf.WriteByte(',')
		}
		head, err := json.Marshal(deliveryHead{d.MessageID, d.MessageType, d.Family, d.AckID, d.Delivery, d.Traceparent, d.Tracestate})
		if err != nil {
			busUnavailable(c)
			return
		}
		buf.Write(head[:len(head)-1])
		buf.WriteString(`,"message":`)
		buf.Write(d.Message)
		buf.WriteByte('}')
	}
	buf.WriteString(`]}`)
	c.Data(http.StatusOK, "application/json", buf.Bytes())
}

// ack handles POST /v1/tenants/{t}/consumers/{name}/acks.
func (s *Server) ack(c *gin.Context) {
	r, ok := s.consumerStart(c, true)
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
	if _, ok := s.openDurable(c, r, nil, false); !ok {
		return
	}
	if failed, err := s.acknowledge(c.Request.Context(), subjects, payload); err != nil {
		// One line for the request, however many of its ids failed.
		s.consumerUnavailable(c, r, "ack", fmt.Errorf("%d of %d acknowledgements unconfirmed, the first: %w", failed, len(subjects), err))
		return
	}
	s.metrics.acked.WithLabelValues(r.ws.id, r.conn.Name, action).Add(float64(len(subjects)))
	res := AckResponse{Acked: len(subjects)}
	if action != AckActionAck {
		res.Action = action
	}
	writeJSON(c, http.StatusOK, res)
}

// acknowledge sends payload (an acknowledgement of JetStream's protocol)
// for every delivery, at most ackConcurrency at a time, and waits for the
// store to confirm each. It returns how many were not confirmed and the
// first error.
func (s *Server) acknowledge(ctx context.Context, subjects []string, payload []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	errs := make([]error, len(subjects))
	slots := make(chan struct{}, ackConcurrency)
	var wg sync.WaitGroup
	for i, subj := range subjects {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			_, errs[i] = s.opts.Store.Conn.RequestWithContext(ctx, subj, payload)
		})
	}
	wg.Wait()
	failed, first := 0, error(nil)
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	return failed, first
}

// ackConcurrency bounds the acknowledgements of one request in flight.
const ackConcurrency = 32

// ackKey is the key ack ids are signed with: the workspace's signing key,
// which every bus serving the workspace holds, so a delivery pulled from one
// can be acknowledged on another.
func ackKey(cfg *config.Workspace) []byte { return []byte(cfg.SigningKey) }

// signAckID is the ack id of a delivery whose acknowledgement subject is
// subject: the subject, base64url, a dot, and the first 16 bytes of its
// HMAC-SHA256 under key, base64url. An id nobody handed out is refused
// without asking the store.
func signAckID(key []byte, subject string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(subject)) + "." + enc.EncodeToString(ackMAC(key, subject))
}

func ackMAC(key []byte, subject string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("storybus ack id\x00"))
	m.Write([]byte(subject))
	return m.Sum(nil)[:16]
}

// ackSubject checks an ack_id's signature under key, decodes it and checks
// that it is a JetStream acknowledgement subject of this consumer of the
// workspace's topic, in either of JetStream's two forms:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
//	$JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>[.<token>]
func ackSubject(key []byte, workspace, name, id string) (string, bool) {
	encoded, mac, ok := strings.Cut(id, ".")
	if !ok || len(id) > 1024 {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(encoded)
	if err != nil || len(b) == 0 || len(b) > 512 {
		return "", false
	}
	subj := string(b)
	if got, err := base64.RawURLEncoding.DecodeString(mac); err != nil || !hmac.Equal(got, ackMAC(key, subj)) {
		return "", false
	}
	tokens := strings.Split(subj, ".")
	for _, t := range tokens {
		if t == "" || strings.ContainsAny(t, "*> \t\r\n") {
			return "", false
		}
	}
	if len(tokens) < 9 || tokens[0] != "$JS" || tokens[1] != "ACK" {
		return "", false
	}
	var rest []string
	switch {
	case len(tokens) == 9:
		rest = tokens[2:]
	case len(tokens) >= 11 && len(tokens) <= 12:
		rest = tokens[4:]
	default:
		return "", false
	}
	if rest[0] != store.StreamName(workspace) || rest[1] != name {
		return "", false
	}
	for _, n := range rest[2:7] {
		if _, err := strconv.ParseUint(n, 10, 64); err != nil {
			return "", false
		}
	}
	return subj, true
}

// consumerUnavailable logs a store failure and answers the generic 503.
func (s *Server) consumerUnavailable(c *gin.Context, r *consumeRequest, op string, err error) {
	s.log.ErrorContext(c.Request.Context(), "consumer store operation failed", "workspace", r.ws.id, "consumer", r.name, "op", op, "error", err)
	busUnavailable(c)
}
