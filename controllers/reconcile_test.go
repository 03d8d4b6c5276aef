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
	c := newCoalescer(delay, delay, time.Minute)
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

// TestCoalescerPausesLongerInABurst: a request asked for alone waits the
// quiet pause; requests asked for while others wait too wait the longer
// pause of a burst, the first of them included once the others come.
func TestCoalescerPausesLongerInABurst(t *testing.T) {
	const quiet = 50 * time.Millisecond
	q, out := enqueued(t)
	c := newCoalescer(time.Hour, quiet, 2*time.Hour)
	alone := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "alone"}}
	asked := time.Now()
	c.add(alone, q)
	select {
	case at := <-out:
		if at.Before(asked.Add(quiet)) {
			t.Errorf("enqueued %s after the ask, before the quiet pause of %s", at.Sub(asked), quiet)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a request asked for alone: not enqueued within 30 s")
	}

	// The first of a burst is asked for alone, so it waits the quiet
	// pause until the others come: one long enough not to end first.
	c = newCoalescer(time.Hour, 2*time.Second, 2*time.Hour)
	var burst []reconcile.Request
	for _, name := range []string{"a", "b", "c"} {
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}
		burst = append(burst, req)
		c.add(req, q)
	}
	c.add(burst[0], q)
	select {
	case <-out:
		t.Error("a request of a burst was enqueued after the quiet pause, not the burst's")
	case <-time.After(5 * time.Second):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) != len(burst) {
		t.Errorf("%d requests pending, want the burst's %d", len(c.pending), len(burst))
	}
	for _, p := range c.pending {
		p.timer.Stop()
	}
}

// TestCoalescerIsBounded: asks that never pause still enqueue the request,
// atMost after the first.
func TestCoalescerIsBounded(t *testing.T) {
	q, out := enqueued(t)
	c := newCoalescer(2*time.Second, 2*time.Second, time.Second)
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
