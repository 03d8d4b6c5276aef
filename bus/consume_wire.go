package bus

// The consumer routes' wire forms: the deliveries of a pull answer, the
// acknowledgement request and answer, and the signed ack ids that stand
// for JetStream's acknowledgement subjects.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/store"
)

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

// delivery turns a topic message into the answer's form, its ack id
// signed with key.
func delivery(m jetstream.Msg, key []byte) (Delivery, bool) {
	meta, err := m.Metadata()
	raw := m.Data()
	if err != nil || !json.Valid(raw) {
		return Delivery{}, false
	}
	_, family, _, ok := store.ParseSubject(m.Subject())
	if !ok {
		return Delivery{}, false
	}
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
