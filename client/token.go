package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
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
// token endpoint, POST /v1/tenants/{t}/tokens, through the OAuth2
// client-credentials client of golang.org/x/oauth2, with the connection's
// client id and secret as HTTP Basic credentials, and keeps each until
// shortly before it expires. Without a secret, the HTTP client's TLS client
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
// answer's status, its OAuth2 error code and its rule (401 invalid_client
// auth.credentials.invalid, 400 unauthorized_client connection.inactive).
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
	cc := &clientcredentials.Config{ClientID: c.ClientID, ClientSecret: c.ClientSecret, TokenURL: ep.base + "/tokens",
		// Never the library's default, which guesses by sending the
		// credentials twice: a wrong secret would count as two failed
		// attempts. Without a secret the client certificate
		// authenticates, and client_id goes in the body.
		AuthStyle: oauth2.AuthStyleInHeader}
	if c.ClientSecret == "" {
		cc.AuthStyle = oauth2.AuthStyleInParams
	}
	tok, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, hc))
	var re *oauth2.RetrieveError
	switch {
	case errors.As(err, &re) && re.Response != nil:
		a := &answer{status: re.Response.StatusCode, header: re.Response.Header, body: re.Body}
		_ = json.Unmarshal(re.Body, a)
		return nil, a.failure(c.clock().Now())
	case err != nil:
		return nil, noAnswer(err)
	}
	expiresIn, _ := tok.Extra("expires_in").(float64)
	if !strings.EqualFold(tok.TokenType, "Bearer") || expiresIn < 1 {
		return nil, noAnswer(errors.New("the token endpoint's answer is not a bearer token with expires_in"))
	}
	return &TokenResponse{AccessToken: tok.AccessToken, TokenType: tok.TokenType, ExpiresIn: int(expiresIn)}, nil
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
