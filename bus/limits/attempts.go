package limits

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/netip"
	"time"

	"github.com/storybus/storybus/bus/store"
)

// AttemptRule limits failed credential attempts on one key: after
// MaxFailures failures within Window of the first, the key is locked out
// for Window from the failure that reached the limit. A rule with
// MaxFailures 0 limits nothing.
type AttemptRule struct {
	MaxFailures int
	Window      time.Duration
}

// AttemptKey is one key failures are counted on, with its rule.
type AttemptKey struct {
	Key  string
	Rule AttemptRule
}

// ClientAttemptsKey returns the key of a client id's failed attempts in
// its workspace's limits bucket.
func ClientAttemptsKey(clientID string) string { return "a.client." + clientToken(clientID) }

// AddressAttemptsKey returns the key of a source address's failed
// attempts. An IPv6 address counts as its /64, which one host usually
// holds whole: counting single addresses would let it rotate through them.
func AddressAttemptsKey(addr string) string { return "a.addr." + addressToken(addr) }

// ClientAddressAttemptsKey returns the key of a client id's failed
// attempts from one source address (counted as AddressAttemptsKey counts
// it).
func ClientAddressAttemptsKey(clientID, addr string) string {
	return "a.pair." + clientToken(clientID) + "." + addressToken(addr)
}

// KnownAddressKey returns the key that records a client id's success from
// a source address.
func KnownAddressKey(clientID, addr string) string {
	return "a.known." + clientToken(clientID) + "." + addressToken(addr)
}

// clientToken is a client id as a key token of fixed length: the first
// 16 bytes of its SHA-256, so that any client id a request sends, known or
// not, makes a key of the same short size.
func clientToken(clientID string) string {
	sum := sha256.Sum256([]byte(clientID))
	return store.EncodeToken(string(sum[:16]))
}

func addressToken(addr string) string {
	if a, err := netip.ParseAddr(addr); err == nil {
		a = a.Unmap()
		if a.Is6() {
			p, _ := a.Prefix(64)
			addr = p.String()
		} else {
			addr = a.String()
		}
	}
	return store.EncodeToken(addr)
}

// known is what the bucket holds for a known address: when the client id
// last succeeded from it.
type known struct {
	At int64 `json:"at"`
}

// KnownAddress reports whether the client id succeeded from the address
// within the bucket's TTL (7 days).
func (l *Limiter) KnownAddress(ctx context.Context, clientID, addr string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opTimeout)
	defer cancel()
	k, _, err := get[known](ctx, l.kv, KnownAddressKey(clientID, addr))
	return k.At > 0, err
}

// RememberAddress records the client id's success from the address, once
// a day at most: the key's TTL then keeps it for 7 days.
func (l *Limiter) RememberAddress(ctx context.Context, clientID, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, l.opTimeout)
	defer cancel()
	key := KnownAddressKey(clientID, addr)
	k, rev, err := get[known](ctx, l.kv, key)
	now := l.clock.Now().UnixNano()
	if err != nil || now-k.At < int64(24*time.Hour) {
		return err
	}
	if _, err := l.put(ctx, key, known{At: now}, rev); err != nil && !store.IsConflict(err) {
		return err
	}
	return nil
}

// attempts is what the bucket holds for one attempts key.
type attempts struct {
	// Failures counts the failures since Start.
	Failures int `json:"failures"`
	// Start is the Unix nanosecond of the window's first failure.
	Start int64 `json:"start"`
	// Until, when after now, is the end of the key's lockout.
	Until int64 `json:"until,omitempty"`
}

// AttemptsLocked reports how long until every key is out of lockout: zero
// when none is locked. It only reads.
func (l *Limiter) AttemptsLocked(ctx context.Context, keys ...AttemptKey) (time.Duration, error) {
	now := l.clock.Now().UnixNano()
	var wait time.Duration
	for _, k := range keys {
		if k.Rule.MaxFailures <= 0 {
			continue
		}
		a, _, err := l.loadAttempts(ctx, k.Key)
		if err != nil {
			return 0, err
		}
		if a.Until > now {
			wait = max(wait, time.Duration(a.Until-now))
		}
	}
	return wait, nil
}

// AttemptFailed counts one failed attempt on every key, each by
// compare-and-swap so that replicas add up. A key already locked out is
// left as it is: failures during a lockout do not prolong it.
func (l *Limiter) AttemptFailed(ctx context.Context, keys ...AttemptKey) error {
	for _, k := range keys {
		if k.Rule.MaxFailures <= 0 {
			continue
		}
		if err := l.failAttempt(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

func (l *Limiter) failAttempt(ctx context.Context, k AttemptKey) error {
	ctx, cancel := context.WithTimeout(ctx, l.opTimeout)
	defer cancel()
	var err error
	read := l.loadAttempts
	for range maxAttempts {
		var a attempts
		var rev uint64
		if a, rev, err = read(ctx, k.Key); err != nil {
			return err
		}
		now := l.clock.Now().UnixNano()
		if a.Until > now {
			return nil
		}
		if now-a.Start >= int64(k.Rule.Window) || a.Failures <= 0 {
			a = attempts{Start: now}
		}
		a.Failures++
		if a.Failures >= k.Rule.MaxFailures {
			a.Until = now + int64(k.Rule.Window)
		}
		if _, err = l.put(ctx, k.Key, a, rev); err == nil || !store.IsConflict(err) {
			return err
		}
		// The state the write failed over may have been a replica's,
		// behind the bucket's leader: the next is the leader's.
		read = l.confirmAttempts
	}
	return errors.New("limits: too many concurrent writers")
}

// loadAttempts reads an attempts key; a missing or unreadable one is
// none, at revision 0 when missing.
func (l *Limiter) loadAttempts(ctx context.Context, key string) (attempts, uint64, error) {
	return get[attempts](ctx, l.kv, key)
}

// confirmAttempts reads an attempts key from the bucket's leader.
func (l *Limiter) confirmAttempts(ctx context.Context, key string) (attempts, uint64, error) {
	return get[attempts](ctx, l.leader, key)
}
