package auth

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	config "github.com/storybus/storybus/api/config/v1alpha1"
)

// Cache remembers the tokens that passed Verify, so that a producer's token
// is parsed and checked once, not on every request. It holds at most its
// size and forgets the least recently used token first; a full cache never
// forgets everything at once. A token it remembers is good only while the
// configuration it was verified against is still the one served (a
// rotation or a deactivation replaces it) and until the token expires.
type Cache struct {
	tokens *lru.Cache[string, verified]
}

// verified is a token that passed Verify against cfg.
type verified struct {
	claims *Claims
	cfg    *config.Workspace
}

// NewCache returns a cache of at most size tokens.
func NewCache(size int) *Cache {
	tokens, err := lru.New[string, verified](size)
	if err != nil {
		panic(err) // only for a size under 1
	}
	return &Cache{tokens: tokens}
}

// Get returns the claims of a remembered token and the configuration it was
// verified against, when that configuration is still the one served for
// its workspace (served returns it) and the token has not expired at now.
// A token that fails either is forgotten.
func (c *Cache) Get(token string, now time.Time, served func(workspace string) (*config.Workspace, bool)) (*Claims, *config.Workspace, bool) {
	v, ok := c.tokens.Get(token)
	if !ok {
		return nil, nil, false
	}
	if cfg, ok := served(v.claims.Workspace()); ok && cfg == v.cfg && now.Before(v.claims.ExpiresAt.Time) {
		return v.claims, v.cfg, true
	}
	c.tokens.Remove(token)
	return nil, nil, false
}

// Add remembers a token that Verify accepted against cfg, with its claims.
func (c *Cache) Add(token string, claims *Claims, cfg *config.Workspace) {
	c.tokens.Add(token, verified{claims: claims, cfg: cfg})
}

// Len returns how many tokens are remembered.
func (c *Cache) Len() int { return c.tokens.Len() }
