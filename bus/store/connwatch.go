package store

import (
	"context"
	"sync/atomic"
	"time"
)

// How the store connection notices that its NATS server is lost. A server
// that dies closes its sockets and the client notices at once. One that
// hangs, or whose host or network is lost, leaves them open, and only the
// client's pings notice it: with nats.go's defaults (a ping every 2
// minutes, 2 left unanswered) the bus would go on publishing into the dead
// connection for 4 to 6 minutes, every publish failing at its deadline.
// With a ping every PingInterval, a server that has left MaxPingsOut of
// them unanswered when the next is due is lost, 2 to 3 s after it stopped
// answering: less than the publish core's deadline for its store
// operations (5 s), and longer than any pause of a server that still
// serves. The client then reconnects to another server of the cluster.
const (
	PingInterval = time.Second
	MaxPingsOut  = 2
	// ReconnectWait is how long the client waits before trying again a
	// server it already tried; another server is tried at once.
	ReconnectWait = 250 * time.Millisecond
)

// ConnWatch follows the losses of the store connection. A request sent on
// a connection that is then lost gets no answer any more, not even on the
// connection that replaces it: unwatched, it would wait for its deadline
// while the client has long since reconnected. A nil ConnWatch watches
// nothing.
type ConnWatch struct {
	// epoch is cancelled when the connection in use is lost, and replaced
	// by the next connection's.
	epoch atomic.Pointer[epoch]
}

type epoch struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newConnWatch() *ConnWatch {
	w := &ConnWatch{}
	w.next()
	return w
}

// next starts a new epoch and returns the one it ends.
func (w *ConnWatch) next() *epoch {
	ctx, cancel := context.WithCancel(context.Background())
	return w.epoch.Swap(&epoch{ctx: ctx, cancel: cancel})
}

// lost ends the epoch of the connection just lost.
func (w *ConnWatch) lost() {
	if old := w.next(); old != nil {
		old.cancel()
	}
}

// OnLoss calls f, in a goroutine of its own, when the store connection in
// use now is lost, unless stop is called first. A store operation whose
// context f cancels then fails at once instead of at its deadline, with
// what such a failure means to its caller unchanged (MayHaveLanded: the
// request may have been carried out before the server went). It costs no
// round trip and two allocations.
func (w *ConnWatch) OnLoss(f func()) (stop func() bool) {
	if w == nil {
		return never
	}
	return context.AfterFunc(w.epoch.Load().ctx, f)
}

func never() bool { return false }
