package tlsconfig

import (
	"crypto/tls"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Hosts holds the key pairs that workspaces bring of their own (a pool's
// replicas serve many workspaces), each presented to the clients that
// name one of its host names in their hello (SNI). A host name two
// workspaces both claim is served by neither, nor by a third's wildcard:
// neither can take a name from the other, and the bus's own pair answers
// it. A name one workspace claims exactly is its, even under another's
// wildcard (the operator gives no Tenant a name that overlaps another's).
// Handshakes read a snapshot without a lock; Set and Remove build a new
// one.
type Hosts struct {
	mu sync.Mutex
	// pairs are the workspaces' pairs and host names, by workspace.
	pairs map[string]hostPair
	// byName is the snapshot handshakes read: a host name's pair, for
	// host names exactly one workspace claims.
	byName atomic.Pointer[map[string]*tls.Certificate]
}

type hostPair struct {
	cert  *tls.Certificate
	hosts []string
}

// NewHosts returns an empty set.
func NewHosts() *Hosts {
	h := &Hosts{pairs: map[string]hostPair{}}
	h.byName.Store(&map[string]*tls.Certificate{})
	return h
}

// Set presents cert for hosts on behalf of workspace, in place of what it
// presented before. It returns the host names of hosts another workspace
// claims too, for which neither is presented.
func (h *Hosts) Set(workspace string, cert *tls.Certificate, hosts []string) (contested []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pairs[workspace] = hostPair{cert: cert, hosts: hosts}
	h.rebuild()
	byName := *h.byName.Load()
	for _, n := range hosts {
		if byName[n] != cert {
			contested = append(contested, n)
		}
	}
	return contested
}

// Remove stops presenting workspace's pair.
func (h *Hosts) Remove(workspace string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.pairs[workspace]; !ok {
		return
	}
	delete(h.pairs, workspace)
	h.rebuild()
}

// rebuild makes the snapshot from h.pairs; h.mu is held.
func (h *Hosts) rebuild() {
	claims := map[string]int{}
	for _, p := range h.pairs {
		for _, n := range p.hosts {
			claims[n]++
		}
	}
	next := make(map[string]*tls.Certificate, len(claims))
	for _, p := range h.pairs {
		for _, n := range p.hosts {
			if claims[n] == 1 {
				next[n] = p.cert
			} else {
				// Contested: nil, so that no wildcard of a third
				// workspace answers it either.
				next[n] = nil
			}
		}
	}
	h.byName.Store(&next)
}

// NotAfter returns when each workspace's pair expires, by workspace.
func (h *Hosts) NotAfter() map[string]time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]time.Time, len(h.pairs))
	for ws, p := range h.pairs {
		out[ws] = p.cert.Leaf.NotAfter
	}
	return out
}

// Lookup returns the pair for serverName, a client's SNI: the workspace's
// that claims that very name, or else the one claiming the wildcard of
// its parent; nil when none does.
func (h *Hosts) Lookup(serverName string) *tls.Certificate {
	if serverName == "" {
		return nil
	}
	name := strings.ToLower(strings.TrimSuffix(serverName, "."))
	byName := *h.byName.Load()
	if c, ok := byName[name]; ok {
		return c // nil when contested
	}
	if _, parent, ok := strings.Cut(name, "."); ok && parent != "" {
		return byName["*."+parent]
	}
	return nil
}
