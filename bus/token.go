package bus

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/bus/rules"
)

// TokenResponse is the OAuth2 client-credentials answer.
type TokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
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
	if !ok {
		c.Header("WWW-Authenticate", `Basic realm="storybus"`)
		refuse(c, 0, rules.New(rules.AuthCredentialsInvalid, "send the client id and secret with HTTP Basic authentication", ""))
		return
	}
	conn, ok := cfg.ConnectionByClientID(id)
	if !ok || !conn.CheckSecret(secret) {
		refuse(c, 0, rules.New(rules.AuthCredentialsInvalid, "unknown client id or wrong secret", ""))
		return
	}
	// The connection check of the publish route's stage 4, from the same
	// policy.
	refusal, err := ws.policy.Access(c.Request.Context(), conn.Name)
	if err != nil {
		s.log.Error("policy evaluation failed", "workspace", ws.id, "stage", "token", "error", err)
		busUnavailable(c)
		return
	}
	if refusal != nil {
		refuse(c, 0, *refusal)
		return
	}
	token, ttl, err := auth.Issue(cfg, conn, s.opts.Clock.Now())
	if err != nil {
		s.log.Error("issuing token failed", "workspace", ws.id, "error", err)
		busUnavailable(c)
		return
	}
	c.Header("Cache-Control", "no-store")
	writeJSON(c, http.StatusOK, TokenResponse{AccessToken: token, TokenType: "Bearer", ExpiresIn: int(ttl.Seconds())})
}
