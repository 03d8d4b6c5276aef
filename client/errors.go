package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Rule ids the client acts on. Every rule the bus answers with is in the
// bus's rule catalogue; a program branches on Error.Rule, never on the
// text of a message.
const (
	RuleMessageTooLarge  = "message.too_large"
	RuleMessageNotJSON   = "message.not_json"
	RuleRequestBlocked   = "request.blocked"
	RuleMessageIDReused  = "message_id.reused"
	RuleMessageInFlight  = "message.in_flight"
	RuleSuperseded       = "message.superseded"
	RuleSequenceStale    = "sequence.stale"
	RuleSequenceTerminal = "sequence.terminal"
	RuleStoryNotOwner    = "story.not_owner"
	RuleCommitContention = "commit.contention"
	RuleRateLimited      = "rate.limited"
	RuleQuotaExceeded    = "quota.exceeded"
)

// OAuth2UnauthorizedClient is the token endpoint's OAuth2 error for a
// connection that may not get tokens (connection.inactive): 400 by RFC
// 6749, but configuration, not a bug.
const OAuth2UnauthorizedClient = "unauthorized_client"

// ErrHeld is the cause of an *Error for a message that was not sent because
// an earlier message of its story is kept in the outbox and could not be
// delivered first: it is kept behind that one, in order.
var ErrHeld = errors.New("held behind an earlier message of its story kept in the outbox")

// ErrNoAnswer is the cause of an *Error for an attempt that got no answer
// the client could read: a timeout, a network error or a cut connection.
var ErrNoAnswer = errors.New("no answer from the bus")

// ErrUntrustedCertificate is the cause of an *Error for a request that got
// no answer because the bus's TLS certificate is not trusted: it does not
// chain to the trusted roots (TLSFiles.CAFile, or the system's), names
// another host, or has expired. That is configuration, never retried: the
// same certificate is refused on every attempt. A message is kept in the
// outbox, since the bus never judged it.
var ErrUntrustedCertificate = errors.New("the bus's TLS certificate is not trusted")

// Violation is one entry of an answer's violations or tolerated list.
type Violation struct {
	// Source is schema, conformance, sequence or policy.
	Source string `json:"source"`
	// Rule is a stable id: branch on it.
	Rule string `json:"rule"`
	// Message is for people and may change: never parse it.
	Message string `json:"message"`
	// Path is a JSON Pointer into the message, where the bus can say where.
	Path string `json:"path,omitempty"`
}

// Error is a publish, token or consumer request that did not succeed. It
// carries the bus's answer (Status, Rule, Violations) or, when there was no
// answer, the cause (Err).
type Error struct {
	// Status is the HTTP status of the last answer; 0 when there was none.
	Status int
	// Rule is the first violation's rule, "" when the answer had none.
	Rule string
	// Violations are the answer's violations, every one of them.
	Violations []Violation
	// Text is the message of an answer in API Gateway's {"message":"…"}
	// shape (an unknown path), or the error_description of the token
	// endpoint's OAuth2 error: for people.
	Text string
	// OAuth2 is the error code of the token endpoint's OAuth2 error
	// (RFC 6749 §5.2: invalid_client, unauthorized_client, …); Rule is
	// the catalogued rule beside it.
	OAuth2 string
	// RetryAfter is the answer's Retry-After, when it had one.
	RetryAfter time.Duration
	// RequestID is the last answer's X-Request-Id: quote it to the bus's
	// operators when a failure persists; they find the request by it.
	RequestID string
	// MessageID and MessageType identify the message, for a publish.
	MessageID   string
	MessageType string
	// Attempts is how many times the message was sent by this call.
	Attempts int
	// Kept is set when the message is in the outbox, unchanged, for a
	// later resend; OutboxEntry is its entry id.
	Kept        bool
	OutboxEntry string
	// NotResent is set when the client refused to send the message again
	// because the bus already refused it with 409.
	NotResent bool
	// Err is the cause when there was no final answer: ErrNoAnswer joined
	// with the network error, a context error, or ErrHeld.
	Err error

	snapshot bool
}

// Error says what happened and what to do, in one line: the lines of a
// joined cause are joined with ": ". It names no program: a command line
// that prints it adds its own prefix.
func (e *Error) Error() string {
	var b strings.Builder
	if e.MessageID != "" {
		b.WriteString("message " + e.MessageID + ": ")
	}
	switch {
	case e.Status != 0:
		b.WriteString(strconv.Itoa(e.Status))
		if e.Rule != "" {
			b.WriteString(" " + e.Rule)
		}
		if e.OAuth2 != "" {
			b.WriteString(" (OAuth2 " + e.OAuth2 + ")")
		}
		if len(e.Violations) > 0 && e.Violations[0].Path != "" {
			b.WriteString(" at " + e.Violations[0].Path)
		}
		if e.Text != "" {
			b.WriteString(" " + strconv.Quote(e.Text))
		}
	case e.Err != nil:
		b.WriteString(oneLine(e.Err))
	default:
		b.WriteString("failed")
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " after %d attempts", e.Attempts)
	}
	if a := e.Advice(); a != "" {
		b.WriteString(": " + a)
	}
	return b.String()
}

// oneLine returns err's text on one line: the lines errors.Join writes, one
// per joined error, are joined with ": ".
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", ": ")
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Refused reports whether the bus gave a final verdict against this
// message: resending it unchanged cannot help (400, 403, 409, 413 and
// every other 4xx but 401, 408 and 429).
func (e *Error) Refused() bool {
	return e.Status >= 400 && e.Status < 500 && !retryableStatus(e.Status) && e.Status != http.StatusUnauthorized
}

// Temporary reports whether the failure is of the kind a later resend can
// fix: no answer, 429 or 5xx. A certificate the client does not trust is
// not: it is configuration (ErrUntrustedCertificate).
func (e *Error) Temporary() bool {
	return (e.Status == 0 && e.Err != nil && !e.untrusted()) || retryableStatus(e.Status)
}

// untrusted reports whether the cause is a bus certificate the client does
// not trust.
func (e *Error) untrusted() bool {
	return e.Status == 0 && errors.Is(e.Err, ErrUntrustedCertificate)
}

// Rebuild reports whether the answer asks for a new snapshot, built from
// the story's current state with the next sequence_number and a new
// message_id: a snapshot refused with 409 sequence.stale or
// commit.contention.
func (e *Error) Rebuild() bool {
	return e.Status == http.StatusConflict && e.snapshot && (e.Rule == RuleSequenceStale || e.Rule == RuleCommitContention)
}

// NeedsAlert reports whether a person must act: a bug in the producing
// product (400, 413, a reused message_id) or configuration (a 401 after a
// fresh token, 403, a bus certificate the client does not trust).
func (e *Error) NeedsAlert() bool {
	switch {
	case e.untrusted():
		return true
	case e.Status == http.StatusBadRequest, e.Status == http.StatusRequestEntityTooLarge,
		e.Status == http.StatusUnauthorized, e.Status == http.StatusForbidden:
		return true
	case e.Status == http.StatusConflict && e.Rule == RuleMessageIDReused:
		return true
	}
	return false
}

// Advice says what the producer should do next, for logs.
func (e *Error) Advice() string {
	switch {
	case e.untrusted():
		advice := "configuration: give the client the CA that signed the bus's certificate (TLSFiles.CAFile, --ca-file) or fix the certificate; not retried"
		if e.Kept {
			advice += "; kept in the outbox for a later resend"
		}
		return advice
	case e.OAuth2 == OAuth2UnauthorizedClient:
		return "configuration: the connection may not get tokens; alert an administrator"
	case e.OAuth2 != "" && e.Status == http.StatusBadRequest:
		return "a bug in the token request: the bus refuses it"
	case e.OAuth2 != "" && e.Status == http.StatusUnauthorized:
		return "configuration: the client id or secret is not accepted; stop and alert"
	case e.Status == http.StatusConflict && e.snapshot:
		not := "it is not resent"
		if e.NotResent {
			not = "it was refused before and was not sent again"
		}
		switch e.Rule {
		case RuleSequenceTerminal:
			return not + "; the story is killed and stays killed: tell the user"
		case RuleStoryNotOwner:
			return not + "; publish from the story's owner or ask a workspace admin for a hand-off"
		case RuleMessageIDReused:
			return not + "; a bug: every new message needs a new message_id"
		case RuleSuperseded:
			return not + "; a newer snapshot supersedes it: for a change, rebuild a complete snapshot from current state with a new message_id"
		}
		return not + "; rebuild a complete snapshot from current state, with the next sequence_number and a new message_id"
	case e.Status == http.StatusConflict && e.Rule == RuleMessageIDReused:
		return "a bug: every new message needs a new message_id; it is not resent"
	case e.Status == http.StatusConflict:
		return "refused for this message; it is not resent"
	case e.Status == http.StatusBadRequest:
		return "a bug in the producing product: fix the message at the rule's path; it is not resent unchanged"
	case e.Status == http.StatusRequestEntityTooLarge:
		return "send content by reference: move media and long text out; it is not resent"
	case e.Status == http.StatusUnauthorized:
		return "configuration: refused even with a fresh token; stop and alert"
	case e.Status == http.StatusForbidden && e.Rule == RuleRequestBlocked:
		return "refused by the workspace firewall: check what the client sends"
	case e.Status == http.StatusForbidden:
		return "configuration: alert an administrator"
	case e.Temporary():
		if e.Kept {
			return "not delivered yet; kept in the outbox for a later resend"
		}
		if e.MessageID != "" {
			return "not delivered yet, and not kept: no outbox"
		}
		return "temporary: retry later"
	case e.Refused():
		return "refused; it is not resent"
	}
	return ""
}

// Class is the class of a failure in the terms a newsroom user sees.
type Class int

// The classes of the documentation's "Show it to people".
const (
	// ClassNone is success or an unclassified failure.
	ClassNone Class = iota
	// ClassInvalid: 400 and 413, or a reused message_id. A bug in the
	// producing product.
	ClassInvalid
	// ClassNotAllowed: 401 after a fresh token, 403, a connection that may
	// not get tokens (unauthorized_client), a story owned by another
	// system, or a bus certificate the client does not trust. For an
	// administrator.
	ClassNotAllowed
	// ClassStoryChanged: a snapshot refused as stale, contended or
	// superseded.
	ClassStoryChanged
	// ClassStoryKilled: a snapshot of a killed story.
	ClassStoryKilled
	// ClassNotDelivered: retries exhausted (timeouts, network errors, 429,
	// 5xx); the message is kept for a later resend.
	ClassNotDelivered
)

// String names the class.
func (c Class) String() string {
	switch c {
	case ClassInvalid:
		return "invalid"
	case ClassNotAllowed:
		return "not-allowed"
	case ClassStoryChanged:
		return "story-changed"
	case ClassStoryKilled:
		return "story-killed"
	case ClassNotDelivered:
		return "not-delivered"
	}
	return "none"
}

// Class returns the failure's user-facing class.
func (e *Error) Class() Class {
	switch {
	case e.OAuth2 == OAuth2UnauthorizedClient, e.untrusted():
		return ClassNotAllowed
	case e.Status == http.StatusBadRequest, e.Status == http.StatusRequestEntityTooLarge:
		return ClassInvalid
	case e.Status == http.StatusUnauthorized, e.Status == http.StatusForbidden:
		return ClassNotAllowed
	case e.Status == http.StatusConflict:
		switch e.Rule {
		case RuleSequenceStale, RuleCommitContention, RuleSuperseded:
			return ClassStoryChanged
		case RuleSequenceTerminal:
			return ClassStoryKilled
		case RuleMessageIDReused:
			return ClassInvalid
		}
		return ClassNotAllowed
	case e.Temporary():
		return ClassNotDelivered
	case e.Refused():
		return ClassInvalid
	}
	return ClassNone
}

// UserMessage returns what a newsroom user should read, never a status
// code: the documentation's sentence for the class, pointing at the field
// for an invalid message.
func (e *Error) UserMessage() string {
	switch e.Class() {
	case ClassInvalid:
		if e.Status == http.StatusRequestEntityTooLarge {
			return "This story couldn't be shared with other systems: it is too large."
		}
		field := "the message"
		if len(e.Violations) > 0 && e.Violations[0].Path != "" {
			field = fieldName(e.Violations[0].Path)
		}
		return "This story couldn't be shared with other systems: " + field + " is invalid."
	case ClassNotAllowed:
		return "This system isn't allowed to publish that."
	case ClassStoryChanged:
		return "Someone else changed this story."
	case ClassStoryKilled:
		return "This story was killed and can't be reopened."
	case ClassNotDelivered:
		return "Other systems haven't received the latest version yet. Retrying."
	}
	return ""
}

// fieldName turns a JSON Pointer into a dotted field name.
func fieldName(pointer string) string {
	tokens := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	for i, t := range tokens {
		tokens[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
	}
	return strings.Join(tokens, ".")
}

// AsError returns the *Error in err's chain.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// StatusOf returns the HTTP status of the answer behind err, or 0.
func StatusOf(err error) int {
	if e, ok := AsError(err); ok {
		return e.Status
	}
	return 0
}

// RuleOf returns the rule of the answer behind err, or "".
func RuleOf(err error) string {
	if e, ok := AsError(err); ok {
		return e.Rule
	}
	return ""
}

// HasRule reports whether any violation of the answer behind err is rule.
func HasRule(err error, rule string) bool {
	e, ok := AsError(err)
	if !ok {
		return false
	}
	for _, v := range e.Violations {
		if v.Rule == rule {
			return true
		}
	}
	return false
}

// IsRefused reports whether err is a final refusal of the message: never
// resend it unchanged.
func IsRefused(err error) bool {
	e, ok := AsError(err)
	return ok && e.Refused()
}

// IsKept reports whether err's message is kept in the outbox.
func IsKept(err error) bool {
	e, ok := AsError(err)
	return ok && e.Kept
}

// NeedsRebuild reports whether err asks for a new snapshot built from the
// story's current state with a new message_id.
func NeedsRebuild(err error) bool {
	e, ok := AsError(err)
	return ok && e.Rebuild()
}

// retryableStatus reports the statuses the client retries: 408 (a
// timeout), 429 and 5xx.
func retryableStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
}
