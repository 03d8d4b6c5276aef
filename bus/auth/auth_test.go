package auth_test

import (
	"testing"
	"time"

	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/bus/config"
	"github.com/storybus/storybus/bus/rules"
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
	claims, rule := auth.Verify(ws, token, now.Add(time.Minute))
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
		"altered":         {ws, token[:len(token)-3] + "abc", now, rules.AuthTokenInvalid},
		"unknown subject": {&config.Workspace{ID: "newsroom", SigningKey: ws.SigningKey}, token, now, rules.AuthTokenInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			if _, rule := auth.Verify(tc.ws, tc.token, tc.at); rule != tc.want {
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
	if _, rule := auth.Verify(ws, old, now.Add(time.Second)); rule != rules.AuthTokenRevoked {
		t.Fatalf("old token: %q", rule)
	}
	fresh, _, _ := auth.Issue(ws, &ws.Connections[0], rotated)
	if _, rule := auth.Verify(ws, fresh, rotated); rule != "" {
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
