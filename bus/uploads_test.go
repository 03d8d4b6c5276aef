package bus_test

import (
	"bufio"
	"bytes"

	"net"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/storybus/storybus/bus"
)

// TestUnauthenticatedUploadsHoldNoMemory opens 5,000 connections that each
// declare a 240,000-byte message, send 239,000 bytes of it without a token
// and stall: each is answered 401 without its body being kept, the bus
// holds at most StalledConnectionBytes for each (the HTTP server's own
// buffers while it drains the connection), and a producer with a token
// still publishes. Before, the bus read every body before the token: 1.2 GB.
func TestUnauthenticatedUploadsHoldNoMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("5,000 connections of 239,000 bytes each")
	}
	h := newHarness(t)
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	u, _ := url.Parse(h.http.URL)
	head := []byte("POST /v1/tenants/newsroom/messages HTTP/1.1\r\nHost: bus\r\nContent-Type: application/json\r\nContent-Length: 240000\r\n\r\n")
	body := bytes.Repeat([]byte(" "), 239_000)

	before := inUse()
	const n = 5_000
	conns := make([]net.Conn, n)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	dialers := make(chan struct{}, 100)
	for i := range n {
		dialers <- struct{}{}
		wg.Go(func() {
			defer func() { <-dialers }()
			c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
			if err != nil {
				return
			}
			conns[i] = c
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			_, _ = c.Write(head)
			_, _ = c.Write(body) // the bus may close the connection meanwhile
			if res, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				statuses[i] = res.StatusCode
			}
		})
	}
	wg.Wait()
	held := inUse() - before
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()

	answered := 0
	for _, s := range statuses {
		if s == http.StatusUnauthorized {
			answered++
		}
	}
	// A connection the bus closed before its 401 was read is not counted;
	// most are answered.
	if answered < n/2 {
		t.Errorf("%d of %d stalled uploads answered 401", answered, n)
	}
	t.Logf("%d stalled unauthenticated uploads: %d answered 401, memory in use grew %d MiB", n, answered, held>>20)
	if limit := int64(n) * bus.StalledConnectionBytes; held > limit {
		t.Errorf("memory in use grew %d MiB with %d stalled unauthenticated uploads, over %d MiB", held>>20, n, limit>>20)
	}
	expect(t, h.post(t, "newsroom", tok, snapshot("", "story-1", 1, "cms")), http.StatusAccepted, "")
}

// inUse is the heap and stacks in use, after a collection.
func inUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// TestStalledSignedUploadsLeaveTheBearerRouteAlone stalls uploads on the
// AWS-signed route, which reads a body before authenticating it, until its
// pool of body bytes is full: the next one is answered 503 at once, and a
// producer with a bearer token, whose body is read from the other pool,
// still publishes.
func TestStalledSignedUploadsLeaveTheBearerRouteAlone(t *testing.T) {
	h := newHarness(t, func(o *bus.Options) { o.BodyBytesInFlight = 1 << 20 }) // a quarter for the signed route
	tok := h.token(t, "newsroom", "cms", cmsSecret)
	u, _ := url.Parse(h.http.URL)
	head := []byte("POST /v1/tenants/newsroom/iam/messages HTTP/1.1\r\nHost: bus\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n")
	var stalled []net.Conn
	defer func() {
		for _, c := range stalled {
			_ = c.Close()
		}
	}()
	for range 2 {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, c)
		if _, err := c.Write(append(head, bytes.Repeat([]byte(" "), 1_000)...)); err != nil {
			t.Fatal(err)
		}
	}
	// Whichever of the two the bus reads first holds 200,000 of the signed
	// route's 262,144 bytes: the other is refused at once (its answer is
	// waiting), and the one holding its bytes is not answered.
	answers := make(chan *http.Response, len(stalled))
	for _, c := range stalled {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		go func() {
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				res = nil
			}
			answers <- res
		}()
	}
	res := <-answers
	if res == nil || res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Fatalf("the stalled signed upload refused first: %v", res)
	}
	select {
	case other := <-answers:
		if other != nil {
			t.Fatalf("both stalled signed uploads were answered; the second: %d", other.StatusCode)
		}
	case <-time.After(200 * time.Millisecond):
	}
	expect(t, h.post(t, "newsroom", tok, snapshot("", "story-1", 1, "cms")), http.StatusAccepted, "")
}
