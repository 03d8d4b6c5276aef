package publish

import (
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// headCache remembers the story heads this process has seen, the least
// recently used forgotten first when it is full (a forgotten head is read
// again from the store on demand). It never goes back to an older head of
// a story, so a cached head can only be behind the store; and it does not
// serve a head whose message the topic's retention may have dropped
// (aged), which is read again.
type headCache struct {
	mu    sync.Mutex // makes put's compare and add one step
	heads *lru.Cache[string, Head]
	// clock and retention age the heads: see aged. The retention is the
	// workspace's, which a new document may change.
	clock     Clock
	retention atomic.Int64
}

func newHeadCache(size int, clock Clock, retention time.Duration) *headCache {
	heads, err := lru.New[string, Head](size)
	if err != nil {
		panic(err) // only for a size under 1, which New never passes
	}
	c := &headCache{heads: heads, clock: clock}
	c.retention.Store(int64(retention))
	return c
}

// fresh returns the story's cached head, unless there is none or it has
// aged.
func (c *headCache) fresh(story string) (Head, bool) {
	h, ok := c.heads.Get(story)
	if !ok || c.aged(h) {
		return Head{}, false
	}
	return h, true
}

// aged reports whether h's message is older than half the topic's
// retention, on the clock: the topic may drop it before the cache would
// notice. Half leaves the other half for the head to be used in.
func (c *headCache) aged(h Head) bool {
	retention := time.Duration(c.retention.Load())
	return retention > 0 && h.Exists && c.clock.Now().Sub(h.Time) >= retention/2
}

// forget drops the story's head: the next attempt reads it from the store.
func (c *headCache) forget(story string) { c.heads.Remove(story) }

// replace stores h, a head just read from the store, whatever the cache
// held.
func (c *headCache) replace(story string, h Head) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heads.Add(story, h)
}

// acked stores h, learnt from the topic's acknowledgement of a publish,
// stamped now on the clock (its wall reading, as the store's retention
// goes by), unless the cache holds a later head.
func (c *headCache) acked(story string, h Head) {
	h.source, h.Time = headAcked, c.clock.Now().Round(0)
	c.put(story, h)
}

// put stores h unless the cache already holds a later head (of equal
// sequence, h wins: a head read again replaces one from an
// acknowledgement, which then takes one compare-and-swap more).
func (c *headCache) put(story string, h Head) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.heads.Peek(story); ok && old.SubjectSeq > h.SubjectSeq {
		return
	}
	c.heads.Add(story, h)
}
