package controllers

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
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
