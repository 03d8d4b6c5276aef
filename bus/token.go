package bus

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/bus/config"
	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/bus/rules"
)

// TokenResponse is the OAuth2 client-credentials answer.
type TokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
}

// TokenAttempts limits failed client-credential attempts at the token
// endpoint, counted in the workspace's limits bucket so that every replica
// adds to the same counts. After PerClient failures with one configured
// client id, or PerAddress failures from one source address (an IPv6
// address counts as its /64), within Window of the first, every attempt of
// that client id or from that address is refused with 429
// auth.attempts.exceeded for Window, even one with the right secret. 0
// turns a limit off.
type TokenAttempts struct {
	PerClient  int
	PerAddress int
	Window     time.Duration
}

// DefaultTokenAttempts are the limits a server has unless told otherwise:
// a producer with a wrong secret is locked out after 10 tries, an address
// guessing across client ids after 100 (many producers may share one
// address behind a NAT or a gateway).
var DefaultTokenAttempts = TokenAttempts{PerClient: 10, PerAddress: 100, Window: 10 * time.Minute}

// keys returns the attempt keys of a request: its source address, and its
// client id when the workspace has it (unknown ids are counted by address
// only, so guessing ids cannot fill the bucket with keys).
func (a TokenAttempts) keys(c *gin.Context, cfg *config.Workspace, clientID string) []limits.AttemptKey {
	keys := []limits.AttemptKey{{
		Key:  limits.AddressAttemptsKey(clientAddress(c)),
		Rule: limits.AttemptRule{MaxFailures: a.PerAddress, Window: a.Window},
	}}
	if _, known := cfg.ConnectionByClientID(clientID); known {
		keys = append(keys, limits.AttemptKey{
			Key:  limits.ClientAttemptsKey(clientID),
			Rule: limits.AttemptRule{MaxFailures: a.PerClient, Window: a.Window},
		})
	}
	return keys
}

// token handles POST /v1/tenants/{t}/tokens: HTTP Basic client credentials
// in, a bearer token for the workspace out.
func (s *Server) token(c *gin.Context) {
	ws, ok := s.workspace(c.Param("tenant"))
	if !ok {
		missingAuthenticationToken(c)
		return
	}
	cfg := ws.cfg.Load()
	id, secret, ok := c.Request.BasicAuth()
	if cert := clientCertificate(c.Request); !ok && cert != nil {
		s.tokenForCertificate(c, ws, cfg, cert)
		return
	}
	if !ok {
		c.Header("WWW-Authenticate", `Basic realm="storybus"`)
		refuse(c, 0, rules.New(rules.AuthCredentialsInvalid, "send the client id and secret with HTTP Basic authentication", ""))
		return
	}
	// Locked out first: once the limit is reached, the right secret is
	// refused too, or guessing would just go on until it succeeded.
	keys := s.attempts.keys(c, cfg, id)
	l, err := s.limiter(ws)
	var wait time.Duration
	if err == nil {
		wait, err = l.AttemptsLocked(c.Request.Context(), keys...)
	}
	if err != nil {
		s.attemptCountersUnavailable(c, ws, err)
		return
	}
	if wait > 0 {
		refuse(c, wait, rules.New(rules.AuthAttemptsExceeded, fmt.Sprintf(
			"too many failed attempts with this client id or from this address within %s; every attempt is refused until Retry-After", s.attempts.Window), ""))
		return
	}
	conn, ok := cfg.ConnectionByClientID(id)
	if !ok || !conn.CheckSecret(secret) {
		if err := l.AttemptFailed(c.Request.Context(), keys...); err != nil {
			s.attemptCountersUnavailable(c, ws, err)
			return
		}
		refuse(c, 0, rules.New(rules.AuthCredentialsInvalid, "unknown client id or wrong secret", ""))
		return
	}
	s.issue(c, ws, cfg, conn, nil)
}

// tokenForCertificate authenticates a token request by its verified client
// certificate (RFC 8705 tls_client_auth) and issues a token bound to it.
// A client_id sent with it must be the matched connection's.
func (s *Server) tokenForCertificate(c *gin.Context, ws *workspace, cfg *config.Workspace, cert *x509.Certificate) {
	conn, ok := cfg.ConnectionByCertificate(cert)
	if !ok {
		refuse(c, 0, rules.New(rules.AuthCredentialsInvalid, "the client certificate is not one of a connection's (tlsClientAuth); or send the client id and secret with HTTP Basic authentication", ""))
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 4096)
	if id := c.PostForm("client_id"); id != "" && id != conn.ClientID {
		refuse(c, 0, rules.New(rules.AuthCredentialsInvalid, "client_id is not the client id of the certificate's connection", ""))
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
		busUnavailable(c)
		return
	}
	if refusal != nil {
		refuse(c, 0, *refusal)
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
		busUnavailable(c)
		return
	}
	c.Header("Cache-Control", "no-store")
	writeJSON(c, http.StatusOK, TokenResponse{AccessToken: token, TokenType: "Bearer", ExpiresIn: int(ttl.Seconds())})
}

// attemptCountersUnavailable answers a token request whose failed attempts
// cannot be checked or counted: refused, never let through uncounted.
func (s *Server) attemptCountersUnavailable(c *gin.Context, ws *workspace, err error) {
	s.log.ErrorContext(c.Request.Context(), "token attempt counters unavailable", "workspace", ws.id, "error", err)
	refuse(c, time.Second, rules.New(rules.RegistryUnavailable, "the limit counters are unreachable; retry after Retry-After", ""))
}
