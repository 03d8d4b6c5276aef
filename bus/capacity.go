package bus

import (
	"cmp"
	"sync/atomic"
	"time"

	"github.com/storybus/storybus/rules"
)

// DefaultRequestConcurrency is a workspace's publish requests that may be
// past authentication in one bus at once when neither its configuration
// (requestConcurrency) nor the bus (Options.RequestConcurrency) says. At the 240,000-byte size limit they hold at most
// 15 MiB of bodies: a quarter of the bus's default body pool, so that one
// workspace cannot take all of it.
const DefaultRequestConcurrency = 64

// capacity bounds a workspace's requests in its later stages (from the
// body on: parsing, validation, the policy, the store operations of the
// publish core). A request that finds every slot taken is refused at once
// with 503 workspace.busy; nothing waits in a queue.
type capacity struct {
	slots atomic.Pointer[chan struct{}]
	// held counts the workspace's refusals being held (holdRefusal).
	held atomic.Int64
}

// resize makes the capacity n slots, n > 0. Requests holding a slot of the
// old size give it back there.
func (c *capacity) resize(n int) {
	if s := c.slots.Load(); s != nil && cap(*s) == n {
		return
	}
	s := make(chan struct{}, n)
	c.slots.Store(&s)
}

// take takes a slot, returning the function that gives it back, or false
// when every slot is taken.
func (c *capacity) take() (release func(), ok bool) {
	s := *c.slots.Load()
	select {
	case s <- struct{}{}:
		return func() { <-s }, true
	default:
		return nil, false
	}
}

// admit is the stage right after authentication: the request takes one of
// its workspace's slots, held until the request is answered, or is
// refused with 503 workspace.busy.
func (s *Server) admit(r *request) outcome {
	release, ok := r.ws.capacity.take()
	if !ok {
		return refused(rules.New(rules.WorkspaceBusy, "the workspace has as many requests in progress in this bus as it may (requestConcurrency); retry with the same message_id and body", ""))
	}
	r.release = release
	return outcome{}
}

// DefaultRefusalHold is how long at most the bus holds a refusal that
// says "over your share" before answering it (Options.RefusalHold).
const DefaultRefusalHold = time.Second

// DefaultHeldRefusals is how many refusals the bus holds at once
// (Options.HeldRefusals); past it they are answered at once.
const DefaultHeldRefusals = 1024

// HeldRefusalsPerWorkspace is how many of one workspace's refusals the bus
// holds at once: a quarter of DefaultHeldRefusals, so that one workspace's
// flood cannot turn the hold off for the others.
const HeldRefusalsPerWorkspace = DefaultHeldRefusals / 4

// heldRules are the refusals that mean the request came faster than its
// share (its rate limit, its workspace's requests or policy evaluations in
// progress): retrying at once cannot succeed, so the answer may as well
// come when a retry could.
var heldRules = map[string]bool{rules.RateLimited: true, rules.WorkspaceBusy: true, rules.PolicyBusy: true}

// holdRefusal waits before a refusal of rule is answered: up to its
// Retry-After, at most Options.RefusalHold, while fewer than
// Options.HeldRefusals are held. A producer that retries at once whatever
// the bus says (a retry storm, a closed-loop flood) then spins no faster
// than its share allows, instead of taking the cores its neighbours
// publish on. The request gives its workspace slot back and drops its body
// and message first: a held request holds its connection, nothing of its
// workspace's share and none of its bytes. At most
// HeldRefusalsPerWorkspace of one workspace's are held.
func (s *Server) holdRefusal(r *request, rule string, retryAfter time.Duration) {
	if s.opts.RefusalHold <= 0 || !heldRules[rule] {
		return
	}
	d := min(cmp.Or(retryAfter, time.Second), s.opts.RefusalHold)
	if s.held.Add(1) > int64(s.opts.HeldRefusals) {
		s.held.Add(-1)
		return
	}
	defer s.held.Add(-1)
	if r.ws.capacity.held.Add(1) > HeldRefusalsPerWorkspace {
		r.ws.capacity.held.Add(-1)
		return
	}
	defer r.ws.capacity.held.Add(-1)
	if r.release != nil {
		r.release()
		r.release = nil
	}
	s.metrics.held.Inc()
	defer s.metrics.held.Dec()
	r.body, r.msg = nil, nil
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.c.Request.Context().Done():
	}
}
