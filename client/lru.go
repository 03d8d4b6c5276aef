package client

import (
	"time"

	golru "github.com/hashicorp/golang-lru/v2"
)

// lru is a bounded map that forgets, when full, the entry least recently
// added (or added again), and forgets entries older than its window, as
// measured by the client's clock: golang-lru's cache, with the window on
// top. Reading an entry does not make it recent: the client's memories are
// of what it did (a snapshot refused, an id handled), not of what it asked.
type lru[V any] struct {
	size   int
	window time.Duration // 0: no window
	items  *golru.Cache[string, lruItem[V]]
}

type lruItem[V any] struct {
	value V
	added time.Time
}

func newLRU[V any](size int, window time.Duration) *lru[V] {
	items, err := golru.New[string, lruItem[V]](size)
	if err != nil {
		panic(err) // only for a size under 1, which the callers never pass
	}
	return &lru[V]{size: size, window: window, items: items}
}

func (l *lru[V]) expired(it lruItem[V], now time.Time) bool {
	return l.window > 0 && now.Sub(it.added) >= l.window
}

func (l *lru[V]) get(key string, now time.Time) (V, bool) {
	it, ok := l.items.Peek(key)
	if !ok || l.expired(it, now) {
		if ok {
			l.items.Remove(key)
		}
		var zero V
		return zero, false
	}
	return it.value, true
}

func (l *lru[V]) add(key string, v V, now time.Time) {
	l.items.Add(key, lruItem[V]{value: v, added: now})
	// Entries are in the order they were added: the expired ones are the
	// oldest.
	for {
		oldest, it, ok := l.items.GetOldest()
		if !ok || !l.expired(it, now) {
			return
		}
		l.items.Remove(oldest)
	}
}

func (l *lru[V]) len() int { return l.items.Len() }

// lruEntry is a key and when it was added.
type lruEntry struct {
	key   string
	added time.Time
}

// oldestFirst returns the keys in the order they were added.
func (l *lru[V]) oldestFirst() []lruEntry {
	keys := l.items.Keys()
	out := make([]lruEntry, 0, len(keys))
	for _, k := range keys {
		if it, ok := l.items.Peek(k); ok {
			out = append(out, lruEntry{key: k, added: it.added})
		}
	}
	return out
}
