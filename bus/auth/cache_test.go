package auth_test

import (
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
)

// TestCacheEvictsTheLeastRecentlyUsed fills a cache of three tokens, uses
// the oldest, and adds a fourth: only the least recently used token is
// forgotten, the rest are kept.
func TestCacheEvictsTheLeastRecentlyUsed(t *testing.T) {
	ws := workspace("newsroom")
	now := time.Now()
	served := func(string) (*config.Workspace, bool) { return ws, true }
	cache := auth.NewCache(3)
	tokens := make([]string, 4)
	for i := range tokens {
		conn := &config.Connection{Name: "cms"}
		token, _, err := auth.Issue(ws, conn, now.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = token
	}
	for _, token := range tokens[:3] {
		claims, rule := verify(ws, token, now)
		if rule != "" {
			t.Fatal(rule)
		}
		cache.Add(token, claims, ws)
	}
	if _, _, ok := cache.Get(tokens[0], now, served); !ok {
		t.Fatal("a remembered token is not found")
	}
	claims, _ := verify(ws, tokens[3], now)
	cache.Add(tokens[3], claims, ws)
	if cache.Len() != 3 {
		t.Fatalf("a full cache holds %d tokens, want 3", cache.Len())
	}
	for i, want := range []bool{true, false, true, true} {
		if _, _, ok := cache.Get(tokens[i], now, served); ok != want {
			t.Errorf("token %d remembered %v, want %v", i, ok, want)
		}
	}
}

// TestCacheForgetsStaleTokens: a token verified against a configuration
// that is no longer served, or past its expiry, is not returned, and is
// forgotten.
func TestCacheForgetsStaleTokens(t *testing.T) {
	ws := workspace("newsroom")
	now := time.Now()
	for name, tc := range map[string]struct {
		served func(string) (*config.Workspace, bool)
		at     time.Time
	}{
		"reloaded":     {func(string) (*config.Workspace, bool) { return workspace("newsroom"), true }, now},
		"not served":   {func(string) (*config.Workspace, bool) { return nil, false }, now},
		"expired":      {func(string) (*config.Workspace, bool) { return ws, true }, now.Add(ws.TokenTTL.Duration)},
		"long expired": {func(string) (*config.Workspace, bool) { return ws, true }, now.Add(48 * time.Hour)},
	} {
		t.Run(name, func(t *testing.T) {
			cache := auth.NewCache(10)
			token, _, err := auth.Issue(ws, &ws.Connections[0], now)
			if err != nil {
				t.Fatal(err)
			}
			claims, rule := verify(ws, token, now)
			if rule != "" {
				t.Fatal(rule)
			}
			cache.Add(token, claims, ws)
			if _, _, ok := cache.Get(token, tc.at, tc.served); ok {
				t.Fatal("a stale token was returned")
			}
			if cache.Len() != 0 {
				t.Fatalf("a stale token is still remembered (%d)", cache.Len())
			}
		})
	}
}
