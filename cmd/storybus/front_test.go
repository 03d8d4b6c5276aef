package main_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// front is an L4 round-robin load balancer, as a Kubernetes Service is
// under kube-proxy: each new client connection goes to the next ready
// member, and its bytes are copied both ways until either side closes.
// A member is ready while its /readyz answers 200, polled every
// readyEvery (endpoints follow readiness the same way); a member that
// refuses the connection is skipped for the next. Connections already
// open stay on their member, as they do behind a Service.
type front struct {
	ln      net.Listener
	members []*member
	next    atomic.Uint64
	// refused counts client connections closed because no member took
	// them.
	refused atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]struct{}
}

// member is one replica behind the front: its publish and operations
// addresses, which a replacement takes over.
type member struct {
	api, ops string
	ready    atomic.Bool
}

// readyEvery is how often the front asks each member's /readyz.
const readyEvery = 100 * time.Millisecond

func newFront(members []*member) (*front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{ln: ln, members: members, stop: make(chan struct{}), open: map[net.Conn]struct{}{}}
	for _, m := range members {
		f.wg.Add(1)
		go f.watch(m)
	}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// URL is the front's base URL.
func (f *front) URL() string { return "http://" + f.ln.Addr().String() }

// Close stops accepting, closes every open connection and stops polling.
func (f *front) Close() {
	close(f.stop)
	f.ln.Close()
	f.mu.Lock()
	for c := range f.open {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *front) watch(m *member) {
	defer f.wg.Done()
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	tick := time.NewTicker(readyEvery)
	defer tick.Stop()
	for {
		res, err := hc.Get("http://" + m.ops + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		m.ready.Store(err == nil && res.StatusCode == http.StatusOK)
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
	}
}

// Ready reports how many members are ready now.
func (f *front) Ready() int {
	n := 0
	for _, m := range f.members {
		if m.ready.Load() {
			n++
		}
	}
	return n
}

func (f *front) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		f.wg.Add(1)
		go f.relay(c)
	}
}

// relay connects client c to the next ready member that accepts it.
func (f *front) relay(c net.Conn) {
	defer f.wg.Done()
	start := f.next.Add(1)
	var backend net.Conn
	for i := range uint64(len(f.members)) {
		m := f.members[(start+i)%uint64(len(f.members))]
		if !m.ready.Load() {
			continue
		}
		b, err := net.DialTimeout("tcp", m.api, time.Second)
		if err == nil {
			backend = b
			break
		}
	}
	if backend == nil {
		f.refused.Add(1)
		c.Close()
		return
	}
	if !f.track(c, backend) {
		return
	}
	defer f.untrack(c, backend)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(backend, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, backend); done <- struct{}{} }()
	<-done
	// Either side closed: so does the other, as a proxy without
	// half-close support does.
	c.Close()
	backend.Close()
	<-done
}

func (f *front) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.stop:
		for _, c := range conns {
			c.Close()
		}
		return false
	default:
	}
	for _, c := range conns {
		f.open[c] = struct{}{}
	}
	return true
}

func (f *front) untrack(conns ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range conns {
		delete(f.open, c)
	}
}
