package client

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Options configure a Client.
type Options struct {
	// URL is the bus's base URL ("https://bus.example.org").
	URL string
	// Workspace is the workspace id, the {t} of the routes.
	Workspace string
	// Tokens gives the bearer tokens; usually a *ClientCredentials.
	Tokens TokenSource
	// HTTPClient sends the requests; default a plain http.Client.
	// AttemptTimeout bounds each attempt.
	HTTPClient *http.Client
	// AttemptTimeout bounds one attempt; default 15 s, longer than the
	// bus's own 10 s bound on a publish.
	AttemptTimeout time.Duration
	// Retry is the retry policy; zero fields take the defaults.
	Retry RetryPolicy
	// Outbox keeps the messages whose retries are exhausted. Without one,
	// such a message is returned to the caller only, and is the caller's
	// to keep.
	Outbox *Outbox
	// Clock tells the time and waits between attempts; default the wall
	// clock.
	Clock Clock
	// Jitter returns a random fraction in [0, 1) for the backoff; default
	// math/rand/v2.
	Jitter func() float64
	// OnAlert, when set, is called for every failure a person must act on
	// (Error.NeedsAlert): 400, 413, a reused message_id, a 401 after a
	// fresh token, 403.
	OnAlert func(*Error)
	// OnRetry, when set, is called with every failed attempt that the
	// client is about to send again: a 429 or 5xx answer, no answer at
	// all, or a 401 retried once with a fresh token. It sees what
	// producers meet while a bus is restarted or its store recovers
	// (metrics, logs, the upgrade prober), and must not block.
	OnRetry func(*Error)
}

// Client publishes SOM messages with the documented retry discipline. It is
// safe for concurrent use.
type Client struct {
	ep      *endpoint
	tokens  TokenSource
	timeout time.Duration
	retry   RetryPolicy
	outbox  *Outbox
	clock   Clock
	jitter  func() float64
	onAlert func(*Error)
	onRetry func(*Error)

	mu      sync.Mutex
	stories map[string][]chan struct{} // the turns waiting per story; the head's is closed
	// refused remembers the snapshots the bus refused with 409, so that
	// they are never sent again.
	refused *lru[refusedSnapshot]
}

// refusedSnapshot is a snapshot refused with 409: the hash of its bytes
// and the refusal.
type refusedSnapshot struct {
	sum [32]byte
	err *Error
}

// Result is a message's final success.
type Result struct {
	MessageID   string
	MessageType string
	Family      string
	// Status is 202 (accepted and published) or 200 (already published).
	Status int
	// Duplicate is set on 200: this exact message was published before.
	Duplicate bool
	// Tolerated lists warnings: log them, they are not failures.
	Tolerated []Violation
	// Attempts is how many times the message was sent.
	Attempts int
}

// maxRefused bounds the memory of snapshots refused with 409.
const maxRefused = 10_000

// New returns a client.
func New(o Options) (*Client, error) {
	ep, err := newEndpoint(o.URL, o.Workspace, o.HTTPClient)
	if err != nil {
		return nil, err
	}
	if o.Tokens == nil {
		return nil, errors.New("client: a TokenSource is required")
	}
	c := &Client{
		ep: ep, tokens: o.Tokens, timeout: o.AttemptTimeout, retry: o.Retry.withDefaults(),
		outbox: o.Outbox, clock: o.Clock, jitter: o.Jitter, onAlert: o.OnAlert, onRetry: o.OnRetry,
		stories: map[string][]chan struct{}{}, refused: newLRU[refusedSnapshot](maxRefused, 0),
	}
	if c.timeout <= 0 {
		c.timeout = 15 * time.Second
	}
	if c.clock == nil {
		c.clock = SystemClock{}
	}
	if c.jitter == nil {
		c.jitter = rand.Float64
	}
	return c, nil
}

// Publish sends m and returns its final answer: a *Result for 202 and 200
// duplicate, or an *Error. It waits behind the earlier messages of m's
// story that are still being sent, retries as the policy says, and keeps m
// in the outbox when the retries are exhausted, when the credentials are
// refused, or when ctx ends before a final answer.
func (c *Client) Publish(ctx context.Context, m *Message) (*Result, error) {
	return c.Send(ctx, m).Wait()
}

// Pending is a message handed to Send.
type Pending struct {
	msg  *Message
	done chan struct{}
	res  *Result
	err  error
}

// Message returns the message.
func (p *Pending) Message() *Message { return p.msg }

// Done is closed when the message has its final answer.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Wait blocks until the message has its final answer and returns it.
func (p *Pending) Wait() (*Result, error) {
	<-p.done
	return p.res, p.err
}

// Send queues m behind the earlier messages of its story and publishes it
// in the background, as Publish does. Messages of one story are sent in the
// order they were handed to Send, each only once the one before has its
// final answer; other stories carry on meanwhile.
func (c *Client) Send(ctx context.Context, m *Message) *Pending {
	p := &Pending{msg: m, done: make(chan struct{})}
	key := m.Key()
	turn := c.enqueue(key)
	go func() {
		defer close(p.done)
		<-turn // in order even when ctx ended: the message is then kept
		defer c.release(key)
		p.res, p.err = c.publishInTurn(ctx, m)
	}()
	return p
}

// enqueue takes a turn in the story's queue; the returned channel is
// closed when it is this turn's go.
func (c *Client) enqueue(key string) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	turn := make(chan struct{})
	c.stories[key] = append(c.stories[key], turn)
	if len(c.stories[key]) == 1 {
		close(turn)
	}
	return turn
}

// release ends the head turn of the story and starts the next.
func (c *Client) release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.stories[key][1:]
	if len(q) == 0 {
		delete(c.stories, key)
		return
	}
	c.stories[key] = q
	close(q[0])
}

// publishInTurn publishes m once its story's earlier messages are done.
func (c *Client) publishInTurn(ctx context.Context, m *Message) (*Result, error) {
	if prev, ok := c.refused.get(m.ID(), c.clock.Now()); ok && prev.sum == sha256.Sum256(m.raw) {
		e := *prev.err
		e.Attempts, e.NotResent, e.Kept, e.OutboxEntry = 0, true, false, ""
		return nil, &e
	}
	if c.outbox != nil && c.outbox.held(m.Key()) {
		// The story has messages kept from before: they go first.
		if _, blocked := c.drain(ctx, m.Key()); blocked {
			e := &Error{MessageID: m.ID(), MessageType: m.Type(), snapshot: m.Snapshot(), Err: ErrHeld}
			return nil, c.keep(m, e)
		}
	}
	res, e := c.send(ctx, m)
	if e == nil {
		return res, nil
	}
	if e.Refused() {
		c.refusal(m, e)
		return nil, e
	}
	e = c.keep(m, e)
	if e.NeedsAlert() && c.onAlert != nil {
		c.onAlert(e)
	}
	return nil, e
}

// refusal handles a final refusal: remember a refused snapshot, alert.
func (c *Client) refusal(m *Message, e *Error) {
	if e.Status == http.StatusConflict && m.Snapshot() && m.ID() != "" {
		c.refused.add(m.ID(), refusedSnapshot{sha256.Sum256(m.raw), e}, c.clock.Now())
	}
	if e.NeedsAlert() && c.onAlert != nil {
		c.onAlert(e)
	}
}

// keep puts a message without a final answer in the outbox.
func (c *Client) keep(m *Message, e *Error) *Error {
	if c.outbox == nil {
		return e
	}
	// Kept before it is put, so that the entry's reason says it is.
	e.Kept = true
	entry, err := c.outbox.Put(m, e, c.clock.Now())
	if err != nil {
		e.Kept = false
		e.Err = errors.Join(e.Err, fmt.Errorf("keeping it in the outbox failed: %w", err))
		return e
	}
	e.OutboxEntry = entry.ID
	return e
}

// send runs the attempts for one message until a final answer, or until
// the retries are exhausted.
func (c *Client) send(ctx context.Context, m *Message) (*Result, *Error) {
	refreshed := false
	retries := 0 // retryable failures so far
	sends := 0
	fail := func(e *Error) (*Result, *Error) {
		e.MessageID, e.MessageType, e.Attempts, e.snapshot = m.ID(), m.Type(), sends, m.Snapshot()
		return nil, e
	}
	retrying := func(e *Error) {
		if c.onRetry != nil {
			e.MessageID, e.MessageType, e.Attempts, e.snapshot = m.ID(), m.Type(), sends, m.Snapshot()
			c.onRetry(e)
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return fail(&Error{Err: err})
		}
		a, tok, e := c.attempt(ctx, m)
		if tok != "" { // sent, whether or not an answer came
			sends++
		}
		switch {
		case e == nil && a.status/100 == 2:
			return &Result{
				MessageID: m.ID(), MessageType: m.Type(), Family: a.Family, Status: a.status,
				Duplicate: a.Duplicate, Tolerated: a.Tolerated, Attempts: sends,
			}, nil
		case e == nil:
			e = a.failure(c.clock.Now())
		}
		if ctx.Err() != nil && e.Status == 0 {
			return fail(&Error{Err: errors.Join(ErrNoAnswer, ctx.Err())})
		}
		switch {
		case e.Status == http.StatusUnauthorized && !refreshed && tok != "":
			// Once, with a fresh token, at once.
			c.tokens.Invalidate(tok)
			refreshed = true
			retrying(e)
			continue
		case e.Status == http.StatusUnauthorized, !e.Temporary():
			return fail(e)
		}
		retries++
		if retries >= c.retry.Attempts {
			return fail(e)
		}
		wait := c.retry.Backoff(retries, c.jitter())
		if e.RetryAfter > c.retry.MaxRetryAfter {
			return fail(e)
		}
		wait = max(wait, e.RetryAfter)
		retrying(e)
		if err := c.clock.Sleep(ctx, wait); err != nil {
			e.Err = errors.Join(e.Err, err)
			return fail(e)
		}
	}
}

// attempt sends m once. It returns the answer, or an *Error when there was
// none (or the token could not be had), and the token it used.
func (c *Client) attempt(ctx context.Context, m *Message) (*answer, string, *Error) {
	tok, err := c.tokens.Token(ctx)
	if err != nil {
		if e, ok := AsError(err); ok {
			return nil, "", e
		}
		return nil, "", noAnswer(err)
	}
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	a, err := c.ep.do(actx, request{method: http.MethodPost, path: "/messages", body: m.raw, token: tok})
	if err != nil {
		return nil, tok, noAnswer(err)
	}
	return a, tok, nil
}

// ResendResult is what became of one outbox entry in a resend.
type ResendResult struct {
	Entry Entry
	// Result is set when the message was delivered (202 or 200); the
	// entry is removed.
	Result *Result
	// Err is set otherwise: the entry stays pending (a temporary failure,
	// and the story's later entries wait), or moved to refused (a final
	// refusal), or waits behind an earlier entry of its story (ErrHeld).
	Err error
}

// Resend resends the outbox's pending messages, each story's in order,
// oldest story first. A delivered message leaves the outbox; a refused one
// moves to its refused entries; after a temporary failure the story's
// later messages stay kept, behind it. The error is for the outbox itself.
func (c *Client) Resend(ctx context.Context) ([]ResendResult, error) {
	if c.outbox == nil {
		return nil, errors.New("client: no outbox to resend")
	}
	keys, err := c.outbox.keys()
	if err != nil {
		return nil, err
	}
	var out []ResendResult
	for _, key := range keys {
		turn := c.enqueue(key)
		<-turn
		rs, _ := c.drain(ctx, key)
		c.release(key)
		out = append(out, rs...)
	}
	return out, nil
}

// drain resends one story's pending entries in order, in the story's turn.
// It reports whether entries remain pending.
func (c *Client) drain(ctx context.Context, key string) (out []ResendResult, blocked bool) {
	entries, err := c.outbox.pending(key)
	if err != nil {
		return nil, true
	}
	for i, en := range entries {
		m, err := NewMessage(en.Message)
		if err != nil {
			// Kept bytes that are not a JSON object cannot be sent.
			_, _ = c.outbox.refuse(en, &Error{Err: err})
			out = append(out, ResendResult{Entry: en, Err: err})
			continue
		}
		res, e := c.send(ctx, m)
		switch {
		case e == nil:
			if err := c.outbox.Remove(en.ID); err != nil {
				out = append(out, ResendResult{Entry: en, Result: res, Err: err})
				return out, true
			}
			out = append(out, ResendResult{Entry: en, Result: res})
		case e.Refused():
			c.refusal(m, e)
			moved, _ := c.outbox.refuse(en, e)
			out = append(out, ResendResult{Entry: moved, Err: e})
		default:
			e.Kept, e.OutboxEntry = true, en.ID
			_ = c.outbox.update(en, e)
			if e.NeedsAlert() && c.onAlert != nil {
				c.onAlert(e)
			}
			out = append(out, ResendResult{Entry: en, Err: e})
			for _, later := range entries[i+1:] {
				out = append(out, ResendResult{Entry: later, Err: &Error{MessageID: later.MessageID, MessageType: later.MessageType, Kept: true, OutboxEntry: later.ID, Err: ErrHeld}})
			}
			return out, true
		}
	}
	return out, false
}
