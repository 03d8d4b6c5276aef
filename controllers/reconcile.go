package controllers

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// phase is one step of a reconcile over its scope S. It returns when to
// look again for something no watch reports (a zero Result: never) and an
// error that stops the reconcile.
type phase[S any] func(context.Context, S) (ctrl.Result, error)

// doReconcile runs phases in order and merges their results, as
// cluster-api's doReconcile does; unlike it, it stops at the first error,
// because each phase here needs what the ones before it did (no bus
// without its configuration).
func doReconcile[S any](ctx context.Context, s S, phases ...phase[S]) (ctrl.Result, error) {
	var res ctrl.Result
	for _, p := range phases {
		r, err := p(ctx, s)
		if err != nil {
			return res, err
		}
		res = lowestNonZeroResult(res, r)
	}
	return res, nil
}

// lowestNonZeroResult returns the result that asks to be called back
// sooner, a zero one never winning (cluster-api's util.LowestNonZeroResult).
func lowestNonZeroResult(a, b ctrl.Result) ctrl.Result {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	case a.RequeueAfter == 0:
		// Requeue with the rate limiter's delay: the sooner.
		return a
	case b.RequeueAfter == 0:
		return b
	case a.RequeueAfter <= b.RequeueAfter:
		return a
	}
	return b
}

// noRequeue is a phase that never asks to be called back.
func noRequeue[S any](f func(context.Context, S) error) phase[S] {
	return func(ctx context.Context, s S) (ctrl.Result, error) { return ctrl.Result{}, f(ctx, s) }
}

// requeueAfter is a Result asking to be called back after d.
func requeueAfter(d time.Duration) ctrl.Result { return ctrl.Result{RequeueAfter: d} }

// coalesce is how long the configuration controller waits after a change
// of an object it compiles, with no other change of the Tenant's objects,
// before it compiles, while other Tenants' changes wait too (a burst);
// coalesceQuiet is that wait for a Tenant whose changes are the only ones
// waiting; coalesceAtMost bounds the wait from the first change. The
// changes of that time (a Tenant's Connections and Grants created one
// after the other, their Secrets) make one configuration, not one each.
//
// In a burst of new Tenants the longer pause saves a third of the
// compiles (docs/performance.md, runs 7 and 8 of a pool's first runs); a
// Tenant changed alone, one onboarded or a secret rotated on a quiet
// operator, is compiled sooner, where a second compile costs little: a
// kubectl apply of a Tenant's 21 objects sends them a few tens of
// milliseconds apart, and the pause is in the way of its first publish.
const (
	coalesce       = 500 * time.Millisecond
	coalesceQuiet  = 100 * time.Millisecond
	coalesceAtMost = 3 * time.Second
)

// coalescer enqueues a request once the events that ask for it have
// paused, and at most atMost after the first of them: a burst of changes
// makes one reconcile. The pause is delay while other requests wait too,
// quiet when the request is the only one waiting. One coalescer serves
// every watch of a controller, so the events of all the kinds a request
// depends on coalesce together.
type coalescer struct {
	delay, quiet, atMost time.Duration
	mu                   sync.Mutex
	pending              map[reconcile.Request]*pendingRequest
}

// pendingRequest is a request waiting for its events to pause.
type pendingRequest struct {
	first time.Time
	timer *time.Timer
}

// newCoalescer returns a coalescer with the given pauses (in a burst, and
// alone) and bound.
func newCoalescer(delay, quiet, atMost time.Duration) *coalescer {
	return &coalescer{delay: delay, quiet: quiet, atMost: atMost, pending: map[reconcile.Request]*pendingRequest{}}
}

// pauseLocked is how long a pending request's events must pause before
// it is enqueued: quiet when it is the only one pending, delay when
// others are; c.mu is held.
func (c *coalescer) pauseLocked() time.Duration {
	if len(c.pending) > 1 {
		return c.delay
	}
	return c.quiet
}

// add asks for req: it is enqueued into q once the asks pause
// (pauseLocked), or atMost after the first.
func (c *coalescer) add(req reconcile.Request, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if p, ok := c.pending[req]; ok {
		if wait := min(c.pauseLocked(), p.first.Add(c.atMost).Sub(now)); wait > 0 {
			p.timer.Reset(wait)
		}
		return
	}
	p := &pendingRequest{first: now}
	c.pending[req] = p
	p.timer = time.AfterFunc(c.pauseLocked(), func() {
		c.mu.Lock()
		mine := c.pending[req] == p
		if mine {
			delete(c.pending, req)
		}
		c.mu.Unlock()
		// A timer reset just as it fired fires again: that second time
		// finds the request gone (or another's) and adds nothing.
		if mine {
			q.Add(req)
		}
	})
}

// coalesced is an event handler that asks c for the requests fn maps an
// object to; a nil c enqueues them at once.
func coalesced[T any](c *coalescer, fn func(context.Context, T) []reconcile.Request) handler.TypedEventHandler[T, reconcile.Request] {
	add := func(ctx context.Context, o T, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range fn(ctx, o) {
			if c == nil {
				q.Add(req)
			} else {
				c.add(req, q)
			}
		}
	}
	return handler.TypedFuncs[T, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.ObjectOld, q)
			add(ctx, e.ObjectNew, q)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
	}
}
