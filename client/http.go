package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
)

// maxAnswerBytes bounds the answers the client reads: a pull of 100
// messages of 240,000 bytes fits.
const maxAnswerBytes = 32 << 20

// endpoint is one workspace of one bus.
type endpoint struct {
	base string // …/v1/tenants/{t}
	http *http.Client
}

func newEndpoint(rawURL, workspace string, hc *http.Client) (*endpoint, error) {
	if rawURL == "" || workspace == "" {
		return nil, errors.New("client: the bus URL and the workspace are required")
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: bus URL %q is not an http(s) URL", rawURL)
	}
	if hc == nil {
		hc = &http.Client{}
	}
	return &endpoint{base: strings.TrimSuffix(rawURL, "/") + "/v1/tenants/" + url.PathEscape(workspace), http: hc}, nil
}

// answer is one answer of the bus, in any of its documented shapes.
type answer struct {
	status int
	header http.Header
	body   []byte

	Accepted    bool        `json:"accepted"`
	Duplicate   bool        `json:"duplicate"`
	MessageID   string      `json:"message_id"`
	MessageType string      `json:"message_type"`
	Family      string      `json:"family"`
	Tolerated   []Violation `json:"tolerated"`
	Violations  []Violation `json:"violations"`
	Message     string      `json:"message"`
	// OAuth2Error, ErrorDescription and Rule are the token endpoint's
	// OAuth2 error (RFC 6749 §5.2) and the rule behind it.
	OAuth2Error      string `json:"error"`
	ErrorDescription string `json:"error_description"`
	Rule             string `json:"rule"`
}

// request is one HTTP exchange; an error means there was no answer.
type request struct {
	method string
	path   string
	body   []byte
	token  string
	basic  *[2]string
}

func (e *endpoint) do(ctx context.Context, r request) (*answer, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, e.base+r.path, body)
	if err != nil {
		return nil, err
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.basic != nil {
		req.SetBasicAuth(r.basic[0], r.basic[1])
	}
	// The caller's trace continues through the bus to the consumers.
	traceContext.Inject(ctx, propagation.HeaderCarrier(req.Header))
	res, err := e.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxAnswerBytes))
	if err != nil {
		return nil, err
	}
	a := &answer{status: res.StatusCode, header: res.Header, body: b}
	// An answer that is not JSON (a proxy's error page) is judged by its
	// status alone.
	_ = json.Unmarshal(b, a)
	return a, nil
}

// tracerName names the client's tracer.
const tracerName = "github.com/storybus/storybus/client"

// traceContext is the W3C trace context propagator: a publish carries the
// caller's trace in traceparent and tracestate, and a consumer continues
// the trace a message was published in.
var traceContext propagation.TraceContext

// failure turns an answer that is not a success into an *Error.
func (a *answer) failure(now time.Time) *Error {
	e := &Error{Status: a.status, Violations: a.Violations, Text: a.Message, RetryAfter: retryAfter(a.header, now),
		RequestID: a.header.Get("X-Request-Id"), OAuth2: a.OAuth2Error, Rule: a.Rule}
	if len(a.Violations) > 0 {
		e.Rule = a.Violations[0].Rule
	}
	if a.OAuth2Error != "" {
		e.Text = a.ErrorDescription
	}
	return e
}

// noAnswer is the *Error of an exchange that got no answer. A bus
// certificate the client does not trust is told apart: it is
// configuration, not a failure a retry can fix.
func noAnswer(err error) *Error {
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		return &Error{Err: errors.Join(ErrUntrustedCertificate, err)}
	}
	return &Error{Err: errors.Join(ErrNoAnswer, err)}
}

// retryAfter reads Retry-After, in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
