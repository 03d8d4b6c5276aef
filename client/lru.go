package client

import (
	"container/list"
	"sync"
	"time"
)

// lru is a bounded map that forgets its least recently added entries first,
// and entries older than its window.
type lru[V any] struct {
	mu     sync.Mutex
	size   int
	window time.Duration // 0: no window
	order  *list.List    // front: newest
	items  map[string]*list.Element
}

type lruItem[V any] struct {
	key   string
	value V
	added time.Time
}

func newLRU[V any](size int, window time.Duration) *lru[V] {
	return &lru[V]{size: size, window: window, order: list.New(), items: map[string]*list.Element{}}
}

func (l *lru[V]) get(key string, now time.Time) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var zero V
	el, ok := l.items[key]
	if !ok {
		return zero, false
	}
	it := el.Value.(*lruItem[V])
	if l.window > 0 && now.Sub(it.added) >= l.window {
		l.order.Remove(el)
		delete(l.items, key)
		return zero, false
	}
	return it.value, true
}

func (l *lru[V]) add(key string, v V, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.items[key]; ok {
		l.order.MoveToFront(el)
		it := el.Value.(*lruItem[V])
		it.value, it.added = v, now
	} else {
		l.items[key] = l.order.PushFront(&lruItem[V]{key: key, value: v, added: now})
	}
	for l.order.Len() > l.size {
		l.evict(l.order.Back())
	}
	for l.window > 0 {
		back := l.order.Back()
		if back == nil || now.Sub(back.Value.(*lruItem[V]).added) < l.window {
			break
		}
		l.evict(back)
	}
}

func (l *lru[V]) evict(el *list.Element) {
	l.order.Remove(el)
	delete(l.items, el.Value.(*lruItem[V]).key)
}

func (l *lru[V]) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}

// lruEntry is a key and when it was added.
type lruEntry struct {
	key   string
	added time.Time
}

// oldestFirst returns the keys in the order they were added.
func (l *lru[V]) oldestFirst() []lruEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]lruEntry, 0, l.order.Len())
	for el := l.order.Back(); el != nil; el = el.Prev() {
		it := el.Value.(*lruItem[V])
		out = append(out, lruEntry{key: it.key, added: it.added})
	}
	return out
}
