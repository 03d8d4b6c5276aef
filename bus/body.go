package bus

// Stage 2, the request's size and body: what it declares is checked first,
// and its body is read bounded, from a pool of bytes in flight shared by
// every request.

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/storybus/storybus/rules"
)

// exactReadBytes is the largest declared body readBody allocates at once.
const exactReadBytes = 32 << 10

func tooLarge() outcome {
	return refused(rules.New(rules.MessageTooLarge, "the body is over 240,000 bytes", ""))
}

// declaredSize is stage 2 on what the request declares: a Content-Length
// over the limit is refused before anything else is read.
func declaredSize(r *request) outcome {
	if r.c.Request.ContentLength > MaxBodyBytes {
		return tooLarge()
	}
	return outcome{}
}

// StalledConnectionBytes is the most memory one connection holds whose
// request was refused before its body was read, while the HTTP server
// drains what the client still sends (up to 256 KiB, within the server's
// 30 s ReadTimeout): its read and write buffers, the drain's buffer and its
// goroutine. Measured: about 40 KiB.
const StalledConnectionBytes = 64 << 10

// DefaultBodyBytesInFlight bounds the bytes of the request bodies all
// requests may be reading at once: about 270 full-size messages.
const DefaultBodyBytesInFlight = 64 << 20

// readBody is stage 2: the body, read bounded, never whole into memory
// before its size is known. Each read first reserves its declared size (or
// the largest, undeclared) of the bus's body bytes in flight: past them
// the request is answered 503 at once rather than held.
func (s *Server) readBody(r *request) outcome {
	return s.readBodyFrom(r, &s.bodyBytes, s.opts.BodyBytesInFlight)
}

// readSignedBody is readBody for a route whose signature covers the body,
// read before the request is authenticated: from a pool of its own, a
// quarter of the size, so that unauthenticated clients cannot take the
// authenticated ones' bytes.
func (s *Server) readSignedBody(r *request) outcome {
	return s.readBodyFrom(r, &s.signedBodyBytes, s.opts.BodyBytesInFlight/4)
}

func (s *Server) readBodyFrom(r *request, pool *atomic.Int64, limit int64) outcome {
	n := r.c.Request.ContentLength
	if n > MaxBodyBytes {
		return tooLarge()
	}
	reserve := int64(MaxBodyBytes)
	if n >= 0 {
		reserve = n
	}
	if pool.Add(reserve) > limit {
		pool.Add(-reserve)
		r.retry = time.Second
		return refused(rules.New(rules.BusUnavailable, "the bus is reading as many message bodies as it may at once; retry with the same message_id and body", ""))
	}
	defer pool.Add(-reserve)
	var body []byte
	var err error
	if n >= 0 && n <= exactReadBytes {
		// The server ends a body after its Content-Length: read a small one
		// into a buffer of that size, without growing one.
		body = make([]byte, n)
		_, err = io.ReadFull(r.c.Request.Body, body)
	} else {
		// Memory grows with the bytes that arrive, not with what a client
		// that has not yet authenticated declares.
		body, err = io.ReadAll(io.LimitReader(r.c.Request.Body, MaxBodyBytes+1))
	}
	switch {
	case len(body) > MaxBodyBytes:
		return tooLarge()
	case err != nil:
		return refused(rules.New(rules.MessageNotJSON, "the body could not be read: "+err.Error(), ""))
	}
	r.body = body
	return outcome{}
}
