package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// enqueued starts a queue and returns it with a channel of the times its
// requests came out.
func enqueued(t *testing.T) (workqueue.TypedRateLimitingInterface[reconcile.Request], <-chan time.Time) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	t.Cleanup(q.ShutDown)
	out := make(chan time.Time, 100)
	go func() {
		for {
			req, stop := q.Get()
			if stop {
				return
			}
			out <- time.Now()
			q.Done(req)
		}
	}()
	return q, out
}

// TestCoalescerWaitsForAPause: a request asked for twice is enqueued once,
// delay after the last ask (timers never fire early), not after the first.
func TestCoalescerWaitsForAPause(t *testing.T) {
	const delay = time.Second
	q, out := enqueued(t)
	c := newCoalescer(delay, time.Minute)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "newsroom"}}
	c.add(req, q)
	time.Sleep(300 * time.Millisecond)
	last := time.Now()
	c.add(req, q)
	c.add(req, q)
	at := <-out
	if at.Before(last.Add(delay)) {
		t.Errorf("enqueued %s after the last ask, before the pause of %s", at.Sub(last), delay)
	}
	select {
	case again := <-out:
		t.Errorf("enqueued a second time, %s later", again.Sub(at))
	case <-time.After(2 * delay):
	}
}

// TestCoalescerIsBounded: asks that never pause still enqueue the request,
// atMost after the first.
func TestCoalescerIsBounded(t *testing.T) {
	q, out := enqueued(t)
	c := newCoalescer(2*time.Second, time.Second)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "newsroom"}}
	stop := time.After(10 * time.Second)
	for {
		c.add(req, q)
		select {
		case <-out:
			return
		case <-stop:
			t.Fatal("asked every 100 ms for 10 s: never enqueued")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
