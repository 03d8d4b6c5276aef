package bus

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/rules"
)

// TokenResponse is the OAuth2 client-credentials answer.
type TokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
}

// TokenAttempts limits failed client-credential attempts at the token
// endpoint, counted in the workspace's limits bucket so that every replica
// adds to the same counts, and so that failures from elsewhere never deny a
// client that presents its right secret from its own address:
//
//   - PerClientAddress failures with one client id from one source address
//     (an IPv6 address counts as its /64) within Window lock that client id
//     out from that address for Window;
//   - PerAddress failures from one address, whatever the client ids, lock
//     the address out for Window;
//   - PerClient failures with one client id from all addresses within
//     Window guard the client id for Window: only the addresses it
//     succeeded from in the last 7 days may try it meanwhile.
//
// A locked-out attempt is refused with 429 auth.attempts.exceeded, even
// with the right secret. Unknown client ids are counted as known ones are,
// so the answers and their timing do not tell them apart. 0 turns a limit
// off.
type TokenAttempts struct {
	PerClientAddress int
	PerAddress       int
	PerClient        int
	Window           time.Duration
}

// DefaultTokenAttempts returns the limits a server has unless told otherwise:
// a producer with a wrong secret is locked out of its address after 10
// tries, an address guessing across client ids after 100 (many producers
// may share one address behind a NAT or a gateway), and a client id tried
// wrongly 100 times from anywhere is open only to its known addresses.
// One client id thus takes at most 100 wrong guesses per 10 minutes from
// new addresses, 600 an hour, across all of them.
func DefaultTokenAttempts() TokenAttempts {
	return TokenAttempts{PerClientAddress: 10, PerAddress: 100, PerClient: 100, Window: 10 * time.Minute}
}

// attemptKeys are the keys a token request's failure counts on.
type attemptKeys struct {
	// locks lock the request out outright: its address, and its client id
	// from its address.
	locks []limits.AttemptKey
	// guard is the client id's, from every address.
	guard limits.AttemptKey
}

func (a TokenAttempts) keys(addr, clientID string) attemptKeys {
	return attemptKeys{
		locks: []limits.AttemptKey{
			{Key: limits.AddressAttemptsKey(addr), Rule: limits.AttemptRule{MaxFailures: a.PerAddress, Window: a.Window}},
			{Key: limits.ClientAddressAttemptsKey(clientID, addr), Rule: limits.AttemptRule{MaxFailures: a.PerClientAddress, Window: a.Window}},
		},
		guard: limits.AttemptKey{Key: limits.ClientAttemptsKey(clientID), Rule: limits.AttemptRule{MaxFailures: a.PerClient, Window: a.Window}},
	}
}

// lockedOut reports how long the request is locked out: its address or its
// client id from its address, or its client id guarded and the address not
// one it succeeded from.
func lockedOut(ctx context.Context, l *limits.Limiter, k attemptKeys, clientID, addr string) (time.Duration, error) {
	wait, err := l.AttemptsLocked(ctx, k.locks...)
	if err != nil || wait > 0 {
		return wait, err
	}
	guarded, err := l.AttemptsLocked(ctx, k.guard)
	if err != nil || guarded == 0 {
		return 0, err
	}
	if ok, err := l.KnownAddress(ctx, clientID, addr); err != nil || ok {
		return 0, err
	}
	return guarded, nil
}

// unknownClient stands in for a client id the workspace does not have, so
// that checking a secret takes the same work either way.
var unknownClient = config.Connection{SecretHash: config.HashSecret("no client has this secret: it is never compared as true")}

// maxTokenRequestBytes bounds a token request's body: a few form
// parameters.
const maxTokenRequestBytes = 4096

// basicRealm is the realm of the token endpoint's Basic challenge.
const basicRealm = `Basic realm="storybus"`

// TokenError is the token endpoint's error answer (RFC 6749 §5.2), with
// the catalogued rule behind it as an extension member.
type TokenError struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
	Rule        string `json:"rule"`
	// RequestID is the request's X-Request-Id, in 5xx answers only, as
	// in the refusal shape.
	RequestID string `json:"request_id,omitempty"`
}

// tokenRequest is what a token request's client sent to authenticate.
type tokenRequest struct {
	// clientID is the Basic user, or the body's client_id.
	clientID string
	// secret is the Basic password or the body's client_secret; hasSecret
	// is false when the client sent neither (mutual TLS).
	secret    string
	hasSecret bool
}

// token handles POST /v1/tenants/{t}/tokens, the OAuth2 client-credentials
// grant (RFC 6749 §4.4): client credentials in, a bearer token for the
// workspace out.
func (s *Server) token(c *gin.Context) {
	ws, ok := s.workspace(c.Param("tenant"))
	if !ok {
		missingAuthenticationToken(c)
		return
	}
	cfg := ws.cfg.Load()
	tr, problem := readTokenRequest(c)
	if problem != nil {
		tokenError(c, 0, *problem)
		return
	}
	if !tr.hasSecret {
		if cert := clientCertificate(c.Request); cert != nil {
			s.tokenForCertificate(c, ws, cfg, cert, tr.clientID)
			return
		}
		tokenError(c, 0, rules.New(rules.AuthCredentialsInvalid, "send the client id and secret with HTTP Basic authentication (client_secret_basic) or as client_id and client_secret in the body (client_secret_post)", ""))
		return
	}
	if len(tr.clientID) > config.MaxClientIDBytes {
		// No workspace has one so long (Validate refuses it): refused
		// before the store sees it.
		tokenError(c, 0, rules.New(rules.AuthCredentialsInvalid, "unknown client id or wrong secret", ""))
		return
	}
	// Locked out first: once a limit is reached, the right secret is
	// refused too, or guessing would just go on until it succeeded.
	addr := clientAddress(c)
	keys := s.attempts.keys(addr, tr.clientID)
	l := ws.limiter
	wait, err := lockedOut(c.Request.Context(), l, keys, tr.clientID, addr)
	if err != nil {
		s.attemptCountersUnavailable(c, ws, err)
		return
	}
	if wait > 0 {
		tokenError(c, wait, rules.New(rules.AuthAttemptsExceeded, fmt.Sprintf(
			"too many failed attempts with this client id or from this address within %s; every attempt is refused until Retry-After", s.attempts.Window), ""))
		return
	}
	conn, known := cfg.ConnectionByClientID(tr.clientID)
	if !known {
		conn = &unknownClient
	}
	if ok := auth.CheckSecret(conn, tr.secret); !ok || !known {
		if err := l.AttemptFailed(c.Request.Context(), append(keys.locks, keys.guard)...); err != nil {
			s.attemptCountersUnavailable(c, ws, err)
			return
		}
		tokenError(c, 0, rules.New(rules.AuthCredentialsInvalid, "unknown client id or wrong secret", ""))
		return
	}
	if err := l.RememberAddress(c.Request.Context(), tr.clientID, addr); err != nil {
		// The token is still due: only a later guard is less precise.
		s.log.WarnContext(c.Request.Context(), "could not record a client's address", "workspace", ws.id, "error", err)
	}
	s.issue(c, ws, cfg, conn, nil)
}

// readTokenRequest reads a token request's form parameters and the
// client's credentials, or returns the refusal of a malformed request.
func readTokenRequest(c *gin.Context) (tokenRequest, *rules.Violation) {
	invalid := func(id, msg string) (tokenRequest, *rules.Violation) {
		v := rules.New(id, msg, "")
		return tokenRequest{}, &v
	}
	mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return invalid(rules.AuthRequestInvalid, "send the parameters as application/x-www-form-urlencoded: grant_type=client_credentials")
	}
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, maxTokenRequestBytes+1))
	if err != nil {
		return invalid(rules.AuthRequestInvalid, "the body could not be read")
	}
	if len(body) > maxTokenRequestBytes {
		return invalid(rules.AuthRequestInvalid, fmt.Sprintf("the body is over %d bytes", maxTokenRequestBytes))
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return invalid(rules.AuthRequestInvalid, "the body is not form-urlencoded")
	}
	for _, values := range form {
		if len(values) > 1 {
			return invalid(rules.AuthRequestInvalid, "a parameter is sent more than once; send each once")
		}
	}
	switch form.Get("grant_type") {
	case "client_credentials":
	case "":
		return invalid(rules.AuthRequestInvalid, "grant_type is required: send grant_type=client_credentials")
	default:
		return invalid(rules.AuthGrantUnsupported, "the only grant_type is client_credentials")
	}
	if form.Get("scope") != "" {
		return invalid(rules.AuthScopeInvalid, "the bus has no scopes: a token may do what its connection's grants allow; send no scope")
	}
	_, hasPostSecret := form["client_secret"]
	if c.GetHeader("Authorization") == "" {
		if hasPostSecret && form.Get("client_id") == "" {
			return invalid(rules.AuthRequestInvalid, "client_secret needs client_id")
		}
		return tokenRequest{clientID: form.Get("client_id"), secret: form.Get("client_secret"), hasSecret: hasPostSecret}, nil
	}
	id, secret, ok := basicCredentials(c.Request)
	if !ok {
		return invalid(rules.AuthCredentialsInvalid, "the Authorization header is not HTTP Basic with form-urlencoded client id and secret")
	}
	if hasPostSecret {
		return invalid(rules.AuthRequestInvalid, "authenticate one way: HTTP Basic or client_secret in the body, not both")
	}
	if bodyID := form.Get("client_id"); bodyID != "" && bodyID != id {
		return invalid(rules.AuthRequestInvalid, "client_id in the body is not the client id of the Basic credentials")
	}
	return tokenRequest{clientID: id, secret: secret, hasSecret: true}, nil
}

// basicCredentials returns the client id and secret of HTTP Basic client
// authentication, each form-urlencoded before Basic encoding (RFC 6749
// §2.3.1).
func basicCredentials(r *http.Request) (id, secret string, ok bool) {
	rawID, rawSecret, ok := r.BasicAuth()
	if !ok {
		return "", "", false
	}
	id, err := url.QueryUnescape(rawID)
	if err != nil {
		return "", "", false
	}
	secret, err = url.QueryUnescape(rawSecret)
	if err != nil {
		return "", "", false
	}
	return id, secret, true
}

// tokenError answers a token request with an OAuth2 error: the rule's
// error code and status from the catalogue, the violation's message as
// error_description, never cached.
func tokenError(c *gin.Context, retryAfter time.Duration, v rules.Violation) {
	r, _ := rules.Lookup(v.Rule)
	status := rules.TokenStatus(v.Rule)
	code := r.OAuth2Error
	if code == "" {
		code = rules.OAuth2TemporarilyUnavailable
	}
	switch status {
	case http.StatusUnauthorized:
		c.Header("WWW-Authenticate", basicRealm)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		c.Header("Retry-After", strconv.Itoa(retryAfterSeconds(retryAfter)))
	}
	noStore(c)
	c.Set(ctxRule, v.Rule)
	answer := TokenError{Error: code, Description: descriptionText(v.Message), Rule: v.Rule}
	if status >= http.StatusInternalServerError {
		answer.RequestID = requestIDOf(c)
	}
	writeJSON(c, status, answer)
}

// descriptionText keeps error_description to the characters RFC 6749
// §5.2 allows: printable ASCII but the double quote and the backslash.
func descriptionText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '\''
		}
		return r
	}, s)
}

// tokenForCertificate authenticates a token request by its verified client
// certificate (RFC 8705 tls_client_auth) and issues a token bound to it.
// A client_id sent with it must be the matched connection's.
func (s *Server) tokenForCertificate(c *gin.Context, ws *workspace, cfg *config.Workspace, cert *x509.Certificate, clientID string) {
	conn, ok := auth.ConnectionByCertificate(cfg, cert)
	if !ok {
		tokenError(c, 0, rules.New(rules.AuthCredentialsInvalid, "the client certificate is not one of a connection's (tlsClientAuth); or send the client id and secret with HTTP Basic authentication", ""))
		return
	}
	if clientID != "" && clientID != conn.ClientID {
		tokenError(c, 0, rules.New(rules.AuthCredentialsInvalid, "client_id is not the client id of the certificate's connection", ""))
		return
	}
	s.issue(c, ws, cfg, conn, cert)
}

// issue answers a token request whose client authenticated as conn: the
// connection check of the publish route's stage 4, then a token, bound to
// cert when the client authenticated with one.
func (s *Server) issue(c *gin.Context, ws *workspace, cfg *config.Workspace, conn *config.Connection, cert *x509.Certificate) {
	if x := exchangeOf(c.Request.Context()); x != nil {
		x.connection = conn.Name
	}
	refusal, err := ws.policy.Access(c.Request.Context(), conn.Name)
	if err != nil {
		s.log.ErrorContext(c.Request.Context(), "policy evaluation failed", "workspace", ws.id, "stage", "token", "error", err)
		tokenError(c, time.Second, rules.New(rules.BusUnavailable, "internal error; retry", ""))
		return
	}
	if refusal != nil {
		tokenError(c, 0, *refusal)
		return
	}
	var token string
	var ttl time.Duration
	if cert != nil {
		token, ttl, err = auth.IssueBound(cfg, conn, s.opts.Clock.Now(), cert)
	} else {
		token, ttl, err = auth.Issue(cfg, conn, s.opts.Clock.Now())
	}
	if err != nil {
		s.log.ErrorContext(c.Request.Context(), "issuing token failed", "workspace", ws.id, "error", err)
		tokenError(c, time.Second, rules.New(rules.BusUnavailable, "internal error; retry", ""))
		return
	}
	noStore(c)
	writeJSON(c, http.StatusOK, TokenResponse{AccessToken: token, TokenType: "Bearer", ExpiresIn: int(ttl.Seconds())})
}

// attemptCountersUnavailable answers a token request whose failed attempts
// cannot be checked or counted: refused, never let through uncounted.
func (s *Server) attemptCountersUnavailable(c *gin.Context, ws *workspace, err error) {
	s.log.ErrorContext(c.Request.Context(), "token attempt counters unavailable", "workspace", ws.id, "error", err)
	tokenError(c, time.Second, rules.New(rules.RegistryUnavailable, "the failed-attempt counters are unreachable; retry after Retry-After", ""))
}

// noStore marks a token answer uncacheable as RFC 6749 §5.1 asks: with
// Cache-Control for HTTP/1.1 caches and Pragma for HTTP/1.0 ones.
func noStore(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.Header("Pragma", "no-cache")
}
