// Package publish is the bus's idempotent publish core: stages 10 to 13 of
// the publish pipeline. It records a message_id with the hash of its
// content, publishes the message to the workspace's topic, and marks the
// record published, so that a retry of the same message is answered
// without publishing twice (SPEC §5, the "Retries and idempotency" page).
//
// An attempt (attempt.go) carries one publish through the record and the
// topic; a sequencer orders each story's snapshots, by the store's
// compare-and-swap (sequencer.go) or, for a bus that is its store's only
// writer, in the process (sole.go). The argument for both is in
// docs/publish-core.md.
package publish

import (
	"context"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// Lease is how long a recorded but unconfirmed message belongs to the
// attempt that recorded it. A retry within the lease is answered 503
// message.in_flight; after it, the retry takes the record over.
const Lease = 30 * time.Second

// Publisher publishes a message to the topic: the store's interface, which
// *jetstream.JetStream implements and store.TracePublisher wraps; tests
// wrap it to count publish calls.
type Publisher = store.Publisher

// Decision is the workspace policy's verdict on a message (stage 12).
type Decision struct {
	// Refusal, when set, refuses the message.
	Refusal *rules.Violation
	// Warnings are reported under tolerated.
	Warnings []rules.Violation
	// Owner is the story's owner after this snapshot; empty keeps the
	// story's owner, or makes the sender the owner of a new story.
	Owner string
}

// PolicyFunc decides stage 12 for a message given its story's head (an
// empty head for other families).
type PolicyFunc func(head Head) Decision

// Input is one message that passed stages 1 to 9.
type Input struct {
	Msg *som.Message
	// Hash is the SHA-256 of the message's canonical JSON.
	Hash [32]byte
	// Warnings are SOM's warnings (stage 8), always reported.
	Warnings []rules.Violation
	// Policy decides stage 12; nil accepts everything.
	Policy PolicyFunc
}

// Outcome is the core's answer to a publish: accepted, a duplicate, a
// refusal or abandoned. The HTTP layer turns it into a status and a body.
type Outcome struct {
	// Duplicate is set when the message was published before: nothing
	// was published again.
	Duplicate bool
	// Tolerated lists warnings of an accepted message.
	Tolerated []rules.Violation
	// Refusal is set when the message was refused.
	Refusal *rules.Violation
	// RetryAfter, when set, is how long the producer should wait.
	RetryAfter time.Duration
	// Abandoned is set when a fault point stopped the publish: the HTTP
	// layer drops the connection without an answer.
	Abandoned bool
}

// Accepted reports whether the message was published now.
func (o Outcome) Accepted() bool { return !o.Duplicate && o.Refusal == nil && !o.Abandoned }

// Options configure a Core.
type Options struct {
	// StoreClock is the store's time; default the records bucket's server.
	StoreClock StoreClock
	// Clock is the wall clock cached story heads age on against
	// TopicRetention; default SystemClock.
	Clock Clock
	// Faults is called at every fault point.
	Faults Faults
	// Publisher publishes to the topic; default the store's JetStream.
	Publisher Publisher
	// OpTimeout bounds the store operations of one publish, together, up
	// to its answer (one deadline, not one timer per operation), and each
	// store operation after it; default 5s.
	OpTimeout time.Duration
	// HeadCacheSize bounds the story heads kept in memory, the least
	// recently used forgotten first; default 100,000.
	HeadCacheSize int
	// Logger receives internal errors.
	Logger *slog.Logger
	// Observe, when set, is told each store operation's latency.
	Observe func(op string, d time.Duration)
	// SoleWriter says that this Core is the only writer of its workspace's
	// topic: its process owns an embedded store that serves no NATS
	// clients, and makes one Core per workspace. A story's snapshots are
	// then published one at a time in the process, most without the
	// store's compare-and-swap (sole.go).
	SoleWriter bool
	// TopicRetention is how long the topic keeps messages (0: until the
	// store's limits). A cached head whose message is older than half of
	// it is read again from the store, since the topic may have dropped it.
	TopicRetention time.Duration
}

// Core is the publish core of one workspace.
type Core struct {
	ws        *store.Workspace
	pub       Publisher
	storeNow  StoreClock
	faults    Faults
	opTimeout time.Duration
	log       *slog.Logger
	observe   func(string, time.Duration)
	// stories orders each story's snapshots: a casSequencer or a
	// soleWriter, both over the same head cache, heads.
	stories sequencer
	heads   *headCache
	// marking holds the keys of messages this process published whose
	// record is not yet marked: a retry of one of them is a duplicate.
	marking sync.Map
	marks   sync.WaitGroup
}

// New returns the publish core of the workspace.
func New(ws *store.Workspace, js jetstream.JetStream, o Options) *Core {
	c := &Core{
		ws:        ws,
		pub:       o.Publisher,
		storeNow:  o.StoreClock,
		faults:    o.Faults,
		opTimeout: o.OpTimeout,
		log:       o.Logger,
		observe:   o.Observe,
	}
	if c.pub == nil {
		c.pub = js
	}
	if c.storeNow == nil {
		c.storeNow = recordsClock{ws.Records}
	}
	if c.opTimeout <= 0 {
		c.opTimeout = 5 * time.Second
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.observe == nil {
		c.observe = func(string, time.Duration) {}
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	if o.HeadCacheSize <= 0 {
		o.HeadCacheSize = 100_000
	}
	c.heads = newHeadCache(o.HeadCacheSize, o.Clock, o.TopicRetention)
	cas := &casSequencer{heads: c.heads, read: c.readHead, leader: c.confirmHead}
	c.stories = cas
	if o.SoleWriter {
		// The wait for a story leaves the store operations their whole
		// deadline.
		c.stories = newSoleWriter(cas, c.opTimeout)
	}
	return c
}

// RecordsBucket names the bucket the core's records are in.
func (c *Core) RecordsBucket() string { return c.ws.RecordsBucket }

// SetTopicRetention puts in force a topic retention changed since New
// (Options.TopicRetention), once the topic stream has it.
func (c *Core) SetTopicRetention(d time.Duration) { c.heads.retention.Store(int64(d)) }

// Wait blocks until every pending mark has been written or has failed.
func (c *Core) Wait() { c.marks.Wait() }

// Publish runs stages 10 to 13 for a message.
func (c *Core) Publish(ctx context.Context, in Input) Outcome {
	msg := in.Msg
	key := msg.Family
	if msg.StoryID != "" {
		key = msg.StoryID
	} else if id, ok := msg.Doc["payload"].(map[string]any)["asset_id"].(string); ok {
		key = id
	}
	a := &attempt{
		c:        c,
		in:       in,
		msg:      msg,
		key:      store.EncodeToken(msg.MessageID),
		hash:     hex.EncodeToString(in.Hash[:]),
		subject:  store.Subject(c.ws.ID, msg.Family, key),
		snapshot: msg.Family == som.FamilyStoryContext, // the only family with story heads
	}
	if a.snapshot {
		t, err := c.stories.begin(ctx, msg.StoryID, a.subject)
		if err != nil {
			return retryLater(rules.BusPublishFailed, "the story is busy with another snapshot waiting for the store; the message was not published; retry with the same message_id and body", time.Second)
		}
		defer t.end()
		a.story = t
	}
	ctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	// A store operation whose answer the loss of the store connection
	// took fails then, not at the deadline.
	defer c.ws.Watch.OnLoss(cancel)()
	return a.run(ctx)
}

// unavailable answers a failure to reach the records or the topic.
func (c *Core) unavailable(ctx context.Context, err error, op string) Outcome {
	c.log.ErrorContext(ctx, "record store unavailable", "workspace", c.ws.ID, "op", op, "error", err)
	v := rules.New(rules.RegistryUnavailable, "the record store is unreachable; nothing was published", "")
	return Outcome{Refusal: &v, RetryAfter: time.Second}
}

// retryLater refuses with a rule the producer retries after a while.
func retryLater(rule, message string, after time.Duration) Outcome {
	v := rules.New(rule, message, "")
	return Outcome{Refusal: &v, RetryAfter: after}
}

// refuse refuses with v.
func refuse(v rules.Violation) Outcome { return Outcome{Refusal: &v} }

// duplicate answers a message published before.
func duplicate() Outcome { return Outcome{Duplicate: true} }
