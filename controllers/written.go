package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// The operator decides what to write by comparing with its cache, and the
// cache shows a write only once its watch event has come: a reconcile
// that runs before then (another event of the object, a requeue) finds
// the object as it was and would write the same again. Under load, when
// watch events lag, such repeats were a fifth of the operator's writes.
// written remembers, for every object (and status part) the operator
// wrote, what it wrote and the resource version the API server answered
// with; a write of the same content to an object the cache still shows
// older than that is skipped. Once the cache has caught up the usual
// comparison decides: a change made by someone else since (a newer
// version) is repaired as before.
var written = &writtenMemo{last: map[writtenKey]writtenAt{}}

// verified remembers, for every object the operator applies, the version
// of it last found to hold what was applied (and the hash of that): a
// reconcile that finds the same version again knows it holds the same,
// without comparing the object field by field. Any change to the object,
// by anyone, makes a new version, which is compared again. At 500 Tenants
// those comparisons, each turning a cached object into a JSON map, were
// a twelfth of what the operator allocated.
var verified = &writtenMemo{last: map[writtenKey]writtenAt{}}

// writtenKey names one write target: an object by kind, namespace and
// name, and the part of it written (a status part's field manager, or
// empty for the whole object).
type writtenKey struct {
	kind, namespace, name, part string
}

// writtenAt is what was last written to a target, and at which version.
type writtenAt struct {
	hash, resourceVersion string
}

// writtenMemo is the memory behind written.
type writtenMemo struct {
	mu   sync.Mutex
	last map[writtenKey]writtenAt
}

// writtenObjects bounds the targets remembered: past it the memo starts
// again (a write may then be repeated once, never lost).
const writtenObjects = 100_000

// holds reports whether hash is what was last written to k, at a version
// newer than cachedVersion (the version of the object the cache shows):
// writing it again would change nothing.
func (m *writtenMemo) holds(k writtenKey, hash, cachedVersion string) bool {
	m.mu.Lock()
	w, ok := m.last[k]
	m.mu.Unlock()
	if !ok || w.hash != hash || cachedVersion == "" || w.resourceVersion == "" {
		return false
	}
	// Resource versions are etcd revisions; one that does not parse as
	// such is never skipped.
	cmp, err := resourceversion.CompareResourceVersion(cachedVersion, w.resourceVersion)
	return err == nil && cmp < 0
}

// same reports whether hash at version rv is what m holds for k.
func (m *writtenMemo) same(k writtenKey, hash, rv string) bool {
	m.mu.Lock()
	w, ok := m.last[k]
	m.mu.Unlock()
	return ok && rv != "" && w.hash == hash && w.resourceVersion == rv
}

// wrote remembers that hash was written to k, answered with version rv.
func (m *writtenMemo) wrote(k writtenKey, hash, rv string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.last) >= writtenObjects {
		m.last = map[writtenKey]writtenAt{}
	}
	m.last[k] = writtenAt{hash: hash, resourceVersion: rv}
}

// statusHash is the hash of a status, as its JSON map, for written: the
// conditions' transition times left out. A reconcile that reads an
// object older than its last write sets a condition that write already
// changed with a new transition time; the write it repeats is the same.
func statusHash(status map[string]any) (string, error) {
	m := make(map[string]any, len(status))
	for k, v := range status {
		m[k] = v
	}
	if cs, ok := status["conditions"].([]any); ok {
		stripped := make([]any, 0, len(cs))
		for _, c := range cs {
			if cm, ok := c.(map[string]any); ok {
				c2 := make(map[string]any, len(cm))
				for k, v := range cm {
					if k != "lastTransitionTime" {
						c2[k] = v
					}
				}
				c = c2
			}
			stripped = append(stripped, c)
		}
		m["conditions"] = stripped
	}
	return jsonHash(m)
}
