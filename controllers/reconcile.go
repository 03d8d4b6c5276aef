package controllers

import (
	"context"
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
// of an object it compiles before it compiles: the changes of that time
// (a Tenant's Connections and Grants created one after the other, their
// Secrets) make one configuration, not one each.
const coalesce = 500 * time.Millisecond

// coalesced is an event handler that enqueues the requests fn maps an
// object to after delay. The work queue keeps a request waiting once, so
// every event within delay of the first makes one reconcile.
func coalesced[T any](fn func(context.Context, T) []reconcile.Request, delay time.Duration) handler.TypedEventHandler[T, reconcile.Request] {
	add := func(ctx context.Context, o T, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range fn(ctx, o) {
			q.AddAfter(req, delay)
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
