package bus

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/storybus/storybus/bus/rules"
)

// Accepted is the answer to a published message (202).
type Accepted struct {
	Accepted    bool              `json:"accepted"`
	MessageID   string            `json:"message_id"`
	MessageType string            `json:"message_type"`
	Family      string            `json:"family"`
	Tolerated   []rules.Violation `json:"tolerated"`
}

// Duplicate is the answer to a message already published (200).
type Duplicate struct {
	Accepted  bool   `json:"accepted"`
	Duplicate bool   `json:"duplicate"`
	MessageID string `json:"message_id"`
}

// Refusal is the answer to a refused message.
type Refusal struct {
	Accepted   bool              `json:"accepted"`
	Violations []rules.Violation `json:"violations"`
	// RequestID is the request's X-Request-Id, in 5xx answers only: the
	// producer quotes it when it reports a failure that persists.
	RequestID string `json:"request_id,omitempty"`
}

// AWSMessage is the body of the answers API Gateway itself would give: an
// unknown path, and signature failures on the iam routes.
type AWSMessage struct {
	Message string `json:"message"`
}

// MissingAuthenticationToken is API Gateway's answer to a path it lacks.
const MissingAuthenticationToken = "Missing Authentication Token"

func writeJSON(c *gin.Context, status int, v any) {
	if a, ok := v.(Accepted); ok && len(a.Tolerated) == 0 {
		if b, ok := a.appendPlain(make([]byte, 0, 128)); ok {
			c.Data(status, "application/json", b)
			return
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if err != nil {
		status, b = http.StatusServiceUnavailable, []byte(`{"accepted":false,"violations":[{"source":"policy","rule":"bus.unavailable","message":"internal error"}],"request_id":`+strconv.Quote(requestIDOf(c))+`}`)
	}
	c.Data(status, "application/json", b)
}

// refuse answers with the refusal shape. The status is the first
// violation's catalogued status; 429 and 503 carry Retry-After.
func refuse(c *gin.Context, retryAfter time.Duration, vs ...rules.Violation) {
	refuseStatus(c, 0, retryAfter, vs...)
}

// refuseStatus answers with the refusal shape and the given status; 0 takes
// the first violation's catalogued status.
func refuseStatus(c *gin.Context, status int, retryAfter time.Duration, vs ...rules.Violation) {
	if status == 0 {
		status = rules.Status(vs[0].Rule)
	}
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		c.Header("Retry-After", strconv.Itoa(retryAfterSeconds(retryAfter)))
	case http.StatusUnauthorized:
		c.Header("WWW-Authenticate", bearerChallenge(vs[0]))
	}
	c.Set(ctxRule, vs[0].Rule)
	answer := Refusal{Accepted: false, Violations: vs}
	if status >= http.StatusInternalServerError {
		answer.RequestID = requestIDOf(c)
	}
	writeJSON(c, status, answer)
}

// retryAfterSeconds is a Retry-After in whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// bearerRealm is the realm of the publish and consumer routes' Bearer
// challenge.
const bearerRealm = `Bearer realm="storybus"`

// bearerChallenge is the WWW-Authenticate of a 401 on the bearer routes
// (RFC 6750 §3): error="invalid_token" for a token that was sent and
// refused, no error when none was sent (§3.1).
func bearerChallenge(v rules.Violation) string {
	if v.Rule == rules.AuthTokenMissing {
		return bearerRealm
	}
	return bearerRealm + `, error="invalid_token", error_description="` + descriptionText(v.Message) + `"`
}

func missingAuthenticationToken(c *gin.Context) {
	c.Set(ctxRule, "route")
	writeJSON(c, http.StatusForbidden, AWSMessage{Message: MissingAuthenticationToken})
}

// appendPlain appends the JSON of an Accepted answer with nothing
// tolerated, the answer to almost every publish, without the reflection of
// encoding/json. It reports false, leaving the encoder to it, when a string
// holds a byte JSON would escape (none of the validated message_id, the
// enum message_type and the family does).
func (a Accepted) appendPlain(b []byte) ([]byte, bool) {
	for _, s := range [...]string{a.MessageID, a.MessageType, a.Family} {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
				return nil, false
			}
		}
	}
	b = append(b, `{"accepted":`...)
	b = strconv.AppendBool(b, a.Accepted)
	b = append(b, `,"message_id":"`...)
	b = append(b, a.MessageID...)
	b = append(b, `","message_type":"`...)
	b = append(b, a.MessageType...)
	b = append(b, `","family":"`...)
	b = append(b, a.Family...)
	return append(b, `","tolerated":[]}`...), true
}
