package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"
)

// TokenSource gives the bearer tokens requests carry.
type TokenSource interface {
	// Token returns a token, from a cache while it is fresh.
	Token(ctx context.Context) (string, error)
	// Invalidate drops token from the cache after the bus refused it with
	// 401, so that the next Token fetches a new one.
	Invalidate(token string)
}

// TokenResponse is the bus's OAuth2 client-credentials answer.
type TokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
}

// ClientCredentials is a TokenSource that gets tokens from the workspace's
// token endpoint, POST /v1/tenants/{t}/tokens, with the connection's client
// id and secret as HTTP Basic credentials, and keeps each until shortly
// before it expires. Without a secret, the HTTP client's TLS client
// certificate authenticates the connection (mutual TLS, see
// NewHTTPClient), and the tokens are bound to that certificate.
type ClientCredentials struct {
	// URL is the bus's base URL ("https://bus.example.org").
	URL string
	// Workspace is the workspace id, the {t} of the routes.
	Workspace    string
	ClientID     string
	ClientSecret string
	// HTTPClient defaults to a client with a 30 s timeout.
	HTTPClient *http.Client
	// Clock defaults to the wall clock.
	Clock Clock
	// Leeway is how long before its expiry a token is replaced; default
	// one minute, and never more than half the token's lifetime.
	Leeway time.Duration

	mu        sync.Mutex
	token     string
	refreshAt time.Time
}

// Token returns the cached token, or fetches a new one when there is none
// or it is about to expire. A refused request is an *Error with the
// answer's status and rule (401 auth.credentials.invalid, 403
// connection.inactive).
func (c *ClientCredentials) Token(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" && c.clock().Now().Before(c.refreshAt) {
		return c.token, nil
	}
	tr, err := c.fetch(ctx)
	if err != nil {
		return "", err
	}
	life := time.Duration(tr.ExpiresIn) * time.Second
	leeway := c.Leeway
	if leeway <= 0 {
		leeway = time.Minute
	}
	leeway = min(leeway, life/2)
	c.token, c.refreshAt = tr.AccessToken, c.clock().Now().Add(life-leeway)
	return c.token, nil
}

// Invalidate drops token if it is the cached one.
func (c *ClientCredentials) Invalidate(token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token == token {
		c.token = ""
	}
}

// Fetch gets a new token, bypassing and not touching the cache.
func (c *ClientCredentials) Fetch(ctx context.Context) (*TokenResponse, error) {
	return c.fetch(ctx)
}

func (c *ClientCredentials) fetch(ctx context.Context) (*TokenResponse, error) {
	hc := c.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	ep, err := newEndpoint(c.URL, c.Workspace, hc)
	if err != nil {
		return nil, err
	}
	req := request{method: http.MethodPost, path: "/tokens"}
	if c.ClientSecret != "" {
		req.basic = &[2]string{c.ClientID, c.ClientSecret}
	}
	a, err := ep.do(ctx, req)
	if err != nil {
		return nil, noAnswer(err)
	}
	if a.status != http.StatusOK {
		return nil, a.failure(c.clock().Now())
	}
	var tr TokenResponse
	if err := json.Unmarshal(a.body, &tr); err != nil || tr.AccessToken == "" || tr.ExpiresIn <= 0 {
		return nil, noAnswer(errors.New("the token endpoint's answer is not a token"))
	}
	return &tr, nil
}

func (c *ClientCredentials) clock() Clock {
	if c.Clock == nil {
		return SystemClock{}
	}
	return c.Clock
}

// StaticToken is a TokenSource that always gives the same token, for a
// token obtained elsewhere (storybus token). It cannot refresh.
type StaticToken string

// Token returns the token.
func (t StaticToken) Token(context.Context) (string, error) { return string(t), nil }

// Invalidate does nothing: a static token cannot be refreshed.
func (StaticToken) Invalidate(string) {}
