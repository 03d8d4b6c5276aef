package bus

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/rules"
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

// writeAccepted answers 202 with a. The usual answer, nothing tolerated
// and plain strings, is written without the reflection of encoding/json
// (appendPlain); any other goes through writeJSON.
func writeAccepted(c *gin.Context, a Accepted) {
	if len(a.Tolerated) == 0 {
		if b, ok := a.appendPlain(make([]byte, 0, 128)); ok {
			c.Data(http.StatusAccepted, "application/json", b)
			return
		}
	}
	writeJSON(c, http.StatusAccepted, a)
}

// writeJSON answers status with v's JSON, without HTML escaping; should v
// not encode, the answer is 503 bus.unavailable.
func writeJSON(c *gin.Context, status int, v any) {
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

// statusOf is the HTTP status of a refusal of rule: its status in the
// catalogue, or, for a rule of the workspace's own modules, the status cfg
// declares for it. It is the one place an answer's status is decided.
func statusOf(cfg *config.Workspace, rule string) int {
	if cfg != nil {
		if tr, ok := cfg.TenantRule(rule); ok {
			return tr.Status
		}
	}
	return rules.Status(rule)
}

// refuse answers a refusal of the catalogue's rules with the refusal shape
// (refuseIn).
func refuse(c *gin.Context, retryAfter time.Duration, vs ...rules.Violation) {
	refuseIn(c, nil, retryAfter, vs...)
}

// refuseIn answers with the refusal shape: the status of the first
// violation (statusOf, in workspace cfg), Retry-After on 429 and 503, the
// Bearer challenge on 401, the request id on 5xx.
func refuseIn(c *gin.Context, cfg *config.Workspace, retryAfter time.Duration, vs ...rules.Violation) {
	status := statusOf(cfg, vs[0].Rule)
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
