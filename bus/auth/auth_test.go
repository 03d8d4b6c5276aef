package auth_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/rules"
)

func workspace(id string) *config.Workspace {
	w := &config.Workspace{ID: id, SigningKey: id + "-key-0123456789abcdef0123456789", Connections: []config.Connection{{Name: "cms"}}}
	w.Default()
	return w
}

func TestIssueAndVerify(t *testing.T) {
	ws := workspace("newsroom")
	now := time.Now()
	token, ttl, err := auth.Issue(ws, &ws.Connections[0], now)
	if err != nil || ttl != time.Hour {
		t.Fatalf("issue: %v %s", err, ttl)
	}
	claims, rule := verify(ws, token, now.Add(time.Minute))
	if rule != "" || claims.Connection() != "cms" || claims.Workspace() != "newsroom" {
		t.Fatalf("verify: %q %+v", rule, claims)
	}
	for name, tc := range map[string]struct {
		ws    *config.Workspace
		token string
		at    time.Time
		want  string
	}{
		"expired":         {ws, token, now.Add(ttl + time.Second), rules.AuthTokenExpired},
		"other key":       {workspace("other"), token, now, rules.AuthTokenInvalid},
		"garbage":         {ws, "not-a-token", now, rules.AuthTokenInvalid},
		"altered":         {ws, alterSignature(token), now, rules.AuthTokenInvalid},
		"padding bits":    {ws, alterPaddingBits(token), now, rules.AuthTokenInvalid},
		"unknown subject": {&config.Workspace{ID: "newsroom", SigningKey: ws.SigningKey}, token, now, rules.AuthTokenInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			if _, rule := verify(tc.ws, tc.token, tc.at); rule != tc.want {
				t.Fatalf("rule %q, want %q", rule, tc.want)
			}
		})
	}
}

func TestRotationRevokesOnlyEarlierTokens(t *testing.T) {
	ws := workspace("newsroom")
	now := time.Now()
	old, _, _ := auth.Issue(ws, &ws.Connections[0], now)
	rotated := now.Add(100 * time.Millisecond) // within the same second as the old token's iat
	ws.Connections[0].CredentialsRotatedAt = &rotated
	if _, rule := verify(ws, old, now.Add(time.Second)); rule != rules.AuthTokenRevoked {
		t.Fatalf("old token: %q", rule)
	}
	fresh, _, _ := auth.Issue(ws, &ws.Connections[0], rotated)
	if _, rule := verify(ws, fresh, rotated); rule != "" {
		t.Fatalf("fresh token: %q", rule)
	}
}

func TestPeekReadsTheAudienceUnverified(t *testing.T) {
	ws := workspace("newsroom")
	token, _, _ := auth.Issue(ws, &ws.Connections[0], time.Now())
	c, ok := auth.Peek(token)
	if !ok || c.Workspace() != "newsroom" {
		t.Fatalf("peek %v %+v", ok, c)
	}
	if _, ok := auth.Peek("x.y"); ok {
		t.Fatal("peeked garbage")
	}
}

const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// alterSignature changes the first character of the signature, which always
// carries signature bits.
func alterSignature(token string) string {
	i := strings.LastIndexByte(token, '.') + 1
	c := strings.IndexByte(base64URL, token[i])
	return token[:i] + string(base64URL[c^32]) + token[i+1:]
}

// alterPaddingBits flips the lowest bit of the last character: for an
// HS256 signature (32 bytes in 43 characters) that bit is padding, so a
// lenient decoder would read the same signature.
func alterPaddingBits(token string) string {
	c := strings.IndexByte(base64URL, token[len(token)-1])
	return token[:len(token)-1] + string(base64URL[c^1])
}

func TestAlteredPaddingBitsDecodeToTheSameSignature(t *testing.T) {
	token, _, err := auth.Issue(workspace("newsroom"), &workspace("newsroom").Connections[0], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sig := func(tok string) []byte {
		b, err := base64.RawURLEncoding.DecodeString(tok[strings.LastIndexByte(tok, '.')+1:])
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The premise of the "padding bits" case above: only strict decoding
	// tells the two apart.
	if altered := alterPaddingBits(token); altered == token || string(sig(altered)) != string(sig(token)) {
		t.Fatalf("%s and %s", token, altered)
	}
}

// verify is auth.Verify with its refusal as the rule id, "" when the token
// is accepted; it fails the test when Verify refuses with anything but a
// *rules.Error.
func verify(ws *config.Workspace, token string, at time.Time) (*auth.Claims, string) {
	claims, err := auth.Verify(ws, token, at)
	if err == nil {
		return claims, ""
	}
	v, ok := rules.RuleOf(err)
	if !ok {
		panic("Verify refused without a rule: " + err.Error())
	}
	return claims, v.Rule
}
