// Package auth issues and verifies the workspace access tokens of the
// OAuth2 client-credentials flow: JWTs signed with the workspace's key,
// whose audience is the workspace, and remembers the tokens it verified.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/rules"
)

// Issuer is the iss claim of every token.
const Issuer = "storybus"

// Claims are a token's claims.
type Claims struct {
	jwt.RegisteredClaims
	// Rotation is the connection's credentialsRotatedAt when the token was
	// issued; a token whose Rotation is older than the connection's current
	// one is revoked. Exact, where comparing the second-granular iat with
	// the rotation time would not be.
	Rotation string `json:"rot,omitempty"`
	// Confirmation binds the token to the client certificate it was
	// issued over (RFC 8705): it is accepted only over that certificate.
	Confirmation *Confirmation `json:"cnf,omitempty"`
}

// Confirmation is a token's cnf claim.
type Confirmation struct {
	// X5tS256 is the base64url SHA-256 thumbprint of the client
	// certificate's DER.
	X5tS256 string `json:"x5t#S256"`
}

// Thumbprint returns a certificate's x5t#S256 thumbprint.
func Thumbprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// BoundTo reports whether the token may be used over a connection that
// presented peer (nil: no certificate): always for an unbound token, only
// over the same certificate for a bound one.
func (c *Claims) BoundTo(peer *x509.Certificate) bool {
	if c.Confirmation == nil {
		return true
	}
	return peer != nil && subtle.ConstantTimeCompare([]byte(Thumbprint(peer)), []byte(c.Confirmation.X5tS256)) == 1
}

// Connection returns the connection name the token was issued to.
func (c *Claims) Connection() string { return c.Subject }

// Workspace returns the workspace the token was issued for.
func (c *Claims) Workspace() string {
	if len(c.Audience) == 0 {
		return ""
	}
	return c.Audience[0]
}

func rotationOf(conn *config.Connection) string {
	if conn.CredentialsRotatedAt == nil {
		return ""
	}
	return conn.CredentialsRotatedAt.UTC().Format(time.RFC3339Nano)
}

// Issue returns a signed access token for the connection and its lifetime.
func Issue(ws *config.Workspace, conn *config.Connection, now time.Time) (string, time.Duration, error) {
	return issue(ws, conn, now, nil)
}

// IssueBound returns a signed access token bound to the client
// certificate the connection authenticated with (RFC 8705 §3).
func IssueBound(ws *config.Workspace, conn *config.Connection, now time.Time, cert *x509.Certificate) (string, time.Duration, error) {
	return issue(ws, conn, now, &Confirmation{X5tS256: Thumbprint(cert)})
}

func issue(ws *config.Workspace, conn *config.Connection, now time.Time, cnf *Confirmation) (string, time.Duration, error) {
	ttl := ws.TokenTTL.Duration
	claims := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    Issuer,
			Subject:   conn.Name,
			Audience:  jwt.ClaimStrings{ws.ID},
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		Rotation:     rotationOf(conn),
		Confirmation: cnf,
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(ws.SigningKey))
	if err != nil {
		return "", 0, fmt.Errorf("sign token: %w", err)
	}
	return s, ttl, nil
}

// Peek reads a token's claims without verifying it, to find the workspace
// whose key must verify it. Nothing read here is trusted before Verify.
func Peek(token string) (*Claims, bool) {
	var c Claims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &c); err != nil {
		return nil, false
	}
	return &c, true
}

// Verify checks the token against the workspace that issued it, at now,
// and returns its claims, or the refusal (a *rules.Error: expired, invalid
// or revoked) that the token breaks.
func Verify(ws *config.Workspace, token string, now time.Time) (*Claims, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return []byte(ws.SigningKey), nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		// Strict base64: a token whose last character differs only in the
		// unused padding bits is a different token, and is refused.
		jwt.WithStrictDecoding(),
		jwt.WithIssuer(Issuer),
		jwt.WithAudience(ws.ID),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, rules.Refuse(rules.AuthTokenExpired, "the token has expired", "")
	case err != nil:
		return nil, rules.Refuse(rules.AuthTokenInvalid, "the token is malformed or badly signed", "")
	}
	conn, ok := ws.Connection(c.Subject)
	if !ok {
		return nil, rules.Refuse(rules.AuthTokenInvalid, "the token is malformed or badly signed", "")
	}
	if c.Rotation != rotationOf(conn) {
		return nil, rules.Refuse(rules.AuthTokenRevoked, "the token was issued before the connection's last secret rotation", "")
	}
	return &c, nil
}
