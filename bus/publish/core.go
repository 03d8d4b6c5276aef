// Package publish is the bus's idempotent publish core: stages 10 to 13 of
// the publish pipeline. It records a message_id with the hash of its
// content, publishes the message to the workspace's topic, and marks the
// record published, so that a retry of the same message is answered
// without publishing twice (SPEC §5, the "Retries and idempotency" page).
//
// Every write that decides who owns a record or a story head is a
// compare-and-swap on JetStream, or, for a sole writer's snapshots,
// serialised in the process. A story's head is the last message on its
// subject in the topic stream, so a snapshot is published with an expected
// last subject sequence (unless the sole writer knows the head) and no
// separate head record is written. Marking a
// record published does not delay the answer: once the topic acknowledged
// the message it is published, and a lost mark is covered by the 30 s lease
// and the topic's duplicate window.
package publish

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/rules"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
)

// Lease is how long a recorded but unconfirmed message belongs to the
// attempt that recorded it. A retry within the lease is answered 503
// message.in_flight; after it, the retry takes the record over.
const Lease = 30 * time.Second

// Clock tells the bus's own time. The bus issues and checks tokens and
// measures limits against it; the core decides nothing by it (StoreClock).
type Clock interface{ Now() time.Time }

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// StoreClock tells the store's time, which stamps every record: the lease
// is measured on it, so that a bus whose clock differs from the store's
// still gives a recorded message exactly its 30 s. Tests inject one to
// cross the lease without sleeping.
type StoreClock interface {
	StoreNow(ctx context.Context) (time.Time, error)
}

// recordsClock asks the records bucket's stream for the time: the server
// stamps its answer.
type recordsClock struct{ kv jetstream.KeyValue }

// StoreNow returns the time of the server that answers for the records.
func (c recordsClock) StoreNow(ctx context.Context) (time.Time, error) {
	st, err := c.kv.Status(ctx)
	if err != nil {
		return time.Time{}, err
	}
	b, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || b.StreamInfo().TimeStamp.IsZero() {
		return time.Time{}, errors.New("the store did not say its time")
	}
	return b.StreamInfo().TimeStamp, nil
}

// FaultPoint names a step of the publish core where a fault can be injected.
type FaultPoint string

// The fault points, in the order a publish passes them.
const (
	// FaultAfterRecord: the record is written, nothing published.
	FaultAfterRecord FaultPoint = "after-record"
	// FaultBeforePublish: just before the topic publish (after the head check).
	FaultBeforePublish FaultPoint = "before-publish"
	// FaultPublish: an error returned here is the publish's definite failure.
	FaultPublish FaultPoint = "publish"
	// FaultAfterPublish: published, the record not yet marked.
	FaultAfterPublish FaultPoint = "after-publish"
	// FaultRemove: an error returned here is the failure of removing a record.
	FaultRemove FaultPoint = "remove"
	// FaultMark: an error returned here is the failure of the mark.
	FaultMark FaultPoint = "mark"
)

// FaultPoints lists every fault point.
var FaultPoints = []FaultPoint{FaultAfterRecord, FaultBeforePublish, FaultPublish, FaultAfterPublish, FaultRemove, FaultMark}

// ErrStop, returned by a fault hook, abandons the publish as if the process
// had stopped at that point: no answer is given and nothing is cleaned up.
var ErrStop = errors.New("publish: stopped at a fault point")

// Faults is called at every fault point; nil means no faults.
type Faults func(ctx context.Context, point FaultPoint, messageID string) error

// Publisher publishes a message to the topic. *jetstream.JetStream is one;
// tests wrap it to count publish calls.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Decision is the workspace policy's verdict on a message (stage 12).
type Decision struct {
	// Refusal, when set, refuses the message.
	Refusal *rules.Violation
	// Warnings are reported under tolerated.
	Warnings []rules.Violation
	// Owner is the story's owner after this snapshot.
	Owner string
	// Status is the refusal's HTTP status; 0 takes it from the catalogue.
	Status int
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

// Outcome is the answer to a publish.
type Outcome struct {
	// Status is 202, 200 (duplicate) or the refusal's status.
	Status int
	// Duplicate is set on 200.
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

// Options configure a Core.
type Options struct {
	// StoreClock is the store's time; default the records bucket's server.
	StoreClock StoreClock
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
	// then decided and published one at a time in the process, and over a
	// head the Core learnt from its own acknowledgement without the store's
	// compare-and-swap (which reads the story's last message, often a block
	// from disk for a story not written lately). A head read from the
	// store, one acknowledged more than half the topic's retention ago, and
	// a story whose publish failed or went unanswered (its head is
	// forgotten) take the compare-and-swap.
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
	heads     *headCache

	// sole is Options.SoleWriter; stories then serialises a story's
	// snapshots. retention is the topic's, over which cached heads age.
	sole      bool
	stories   *storyLocks
	retention time.Duration
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
		sole:      o.SoleWriter,
		retention: o.TopicRetention,
	}
	if c.sole {
		c.stories = newStoryLocks()
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
	if o.HeadCacheSize <= 0 {
		o.HeadCacheSize = 100_000
	}
	c.heads = newHeadCache(o.HeadCacheSize)
	return c
}

// Wait blocks until every pending mark has been written or has failed.
func (c *Core) Wait() { c.marks.Wait() }

// Record states.
const (
	stateRecorded   = "recorded"
	statePublished  = "published"
	stateSuperseded = "superseded"
)

// record is the value stored per (workspace, message_id).
type record struct {
	Hash  string `json:"h"`
	State string `json:"s"`
	// After is set on a snapshot's record: the stream sequence of the
	// story head its publication is (or was last) expected to follow. A
	// published snapshot is the first message on its story subject after
	// After, so one read proves or disproves its publication.
	After *uint64 `json:"e,omitempty"`
}

// encodeRecord writes a record's JSON: the hash is hex and the states are
// constants, so nothing needs escaping.
func encodeRecord(hash, state string, after *uint64) []byte {
	b := make([]byte, 0, 112)
	b = append(b, `{"h":"`...)
	b = append(b, hash...)
	b = append(b, `","s":"`...)
	b = append(b, state...)
	b = append(b, '"')
	if after != nil {
		b = append(b, `,"e":`...)
		b = strconv.AppendUint(b, *after, 10)
	}
	return append(b, '}')
}

// attempt carries one publish through the core.
type attempt struct {
	c        *Core
	in       Input
	msg      *som.Message
	key      string
	hash     string
	subject  string
	snapshot bool
	// recorded is the store's timestamp of this attempt's record, read
	// when a contention must be told from a stale view.
	recorded time.Time
	head     Head
	rev      uint64
	// after is the After of this attempt's record (snapshots only).
	after    uint64
	decision Decision
	seqWarn  []rules.Violation
	// sent says a publish of this attempt reached the connection, and
	// settled that its acknowledgement made the cached head this
	// attempt's: a sole writer forgets the head of a story sent to and
	// not settled, which may hold a message its cache does not.
	sent, settled bool
}

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
	if a.snapshot && c.sole {
		// The wait leaves the store operations their whole deadline.
		held, err := c.stories.lock(ctx, msg.StoryID, c.opTimeout)
		if err != nil {
			return a.retryLater(rules.BusPublishFailed, "the story is busy with another snapshot waiting for the store; the message was not published; retry with the same message_id and body", time.Second)
		}
		defer func() {
			if a.sent && !a.settled {
				c.heads.forget(msg.StoryID)
			}
			held.release()
		}()
	}
	ctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	return a.run(ctx)
}

func (a *attempt) run(ctx context.Context) Outcome {
	// Stages 11 and 12 are checked before recording, so a refused message
	// costs no write. Stage 10 still comes first: an existing record for
	// the message_id decides before any refusal.
	if a.snapshot {
		h, ok := a.c.heads.get(a.msg.StoryID)
		if !ok || a.c.aged(h) {
			// A story this process does not know, or whose cached head
			// the topic's retention may have dropped, is read from the
			// store, so that the record names the head its publication
			// follows.
			var err error
			if h, err = a.c.readHead(ctx, a.subject); err != nil {
				return a.c.unavailable(ctx, err, "read story head")
			}
			a.c.heads.replace(a.msg.StoryID, h)
		}
		a.head = h
	}
	if refusal := a.evaluate(); refusal != nil {
		entry, err := a.c.getRecord(ctx, a.key)
		switch {
		case err != nil:
			return a.c.unavailable(ctx, err, "read record")
		case entry != nil:
			return a.existing(ctx, entry)
		}
		return a.refuseDecided(refusal)
	}

	t0 := time.Now()
	rev, err := a.c.ws.Records.Create(ctx, a.key, a.recordValue())
	a.c.observe("record_create", time.Since(t0))
	if errors.Is(err, jetstream.ErrKeyExists) {
		entry, err := a.c.getRecord(ctx, a.key)
		if err != nil {
			return a.c.unavailable(ctx, err, "read record")
		}
		if entry == nil { // removed in between: the other attempt failed
			return a.retryLater(rules.MessageInFlight, "an earlier attempt of this message was just removed; retry", time.Second)
		}
		return a.existing(ctx, entry)
	}
	if err != nil {
		return a.c.unavailable(ctx, err, "create record")
	}
	a.rev = rev
	if err := a.c.fault(ctx, FaultAfterRecord, a.msg.MessageID); err != nil {
		return Outcome{Abandoned: true}
	}
	return a.commit(ctx, false)
}

// recordValue is this attempt's record, recorded and not yet published;
// a snapshot's names the head its publication follows.
func (a *attempt) recordValue() []byte {
	if !a.snapshot {
		return encodeRecord(a.hash, stateRecorded, nil)
	}
	a.after = a.head.SubjectSeq
	return encodeRecord(a.hash, stateRecorded, &a.after)
}

// evaluate applies the snapshot-order rules and the workspace policy to the
// current head, and returns a refusal if either refuses.
func (a *attempt) evaluate() *rules.Violation {
	a.seqWarn = nil
	if a.snapshot {
		refusal, warnings := CheckSequence(a.head, a.msg.SequenceNumber)
		if refusal != nil {
			return refusal
		}
		a.seqWarn = warnings
	}
	a.decision = Decision{Owner: a.head.Owner}
	if a.decision.Owner == "" {
		a.decision.Owner = a.msg.SystemID
	}
	if a.in.Policy != nil {
		a.decision = a.in.Policy(a.head)
	}
	return a.decision.Refusal
}

// commit publishes a recorded message (stage 13). A republication (the
// takeover of a record left unpublished) reports only SOM warnings and is
// superseded, never contended, by a newer snapshot.
func (a *attempt) commit(ctx context.Context, republish bool) Outcome {
	for try := 0; ; try++ {
		if a.snapshot && a.head.SubjectSeq != a.after {
			// The head moved since the record was written: the record
			// names the new one before the publication can follow it.
			if out, ok := a.rename(ctx); !ok {
				return out
			}
		}
		if err := a.c.fault(ctx, FaultBeforePublish, a.msg.MessageID); err != nil {
			return Outcome{Abandoned: true}
		}
		err := a.c.fault(ctx, FaultPublish, a.msg.MessageID)
		if errors.Is(err, ErrStop) {
			return Outcome{Abandoned: true}
		}
		var ack *jetstream.PubAck
		if err == nil {
			ack, err = a.publish(ctx)
		}
		if err == nil {
			if ferr := a.c.fault(ctx, FaultAfterPublish, a.msg.MessageID); ferr != nil {
				return Outcome{Abandoned: true}
			}
			a.published(ack)
			if ack != nil && ack.Duplicate {
				// The topic already holds this message_id: an earlier
				// attempt published it.
				return Outcome{Status: http.StatusOK, Duplicate: true}
			}
			tolerated := append([]rules.Violation{}, a.in.Warnings...)
			if !republish {
				tolerated = append(append(tolerated, a.seqWarn...), a.decision.Warnings...)
			}
			return Outcome{Status: http.StatusAccepted, Tolerated: tolerated}
		}
		if !a.snapshot || !store.IsWrongLastSequence(err) {
			return a.publishFailed(ctx, err)
		}
		// The story head moved since it was read.
		fresh, rerr := a.c.readHead(ctx, a.subject)
		if rerr != nil {
			return a.c.unavailable(ctx, rerr, "read story head")
		}
		a.c.heads.replace(a.msg.StoryID, fresh)
		if republish {
			if out, done := a.supersededBy(ctx, fresh); done {
				return out
			}
			a.head = fresh
			continue
		}
		during, err := a.changedSinceRecorded(ctx, fresh)
		if err != nil {
			return a.c.unavailable(ctx, err, "read record")
		}
		if during || try >= 2 {
			a.remove(ctx)
			v := rules.New(rules.CommitContention, "another writer changed the story at the same moment; nothing was recorded", "/payload/story_id")
			return refuse(v)
		}
		// Only this process's view of the head was behind: re-decide.
		a.head = fresh
		if refusal := a.evaluate(); refusal != nil {
			a.remove(ctx)
			return a.refuseDecided(refusal)
		}
	}
}

// rename rewrites this attempt's record to name the current head, guarded
// by the record's revision. It reports false, with the answer, when the
// record is no longer this attempt's or the store failed.
func (a *attempt) rename(ctx context.Context) (Outcome, bool) {
	cctx, cancel := context.WithTimeout(ctx, a.c.opTimeout)
	rev, err := a.c.ws.Records.Update(cctx, a.key, a.recordValue(), a.rev)
	cancel()
	if isRevisionConflict(err) {
		return a.retryLater(rules.MessageInFlight, "another retry of this message is publishing it", time.Second), false
	}
	if err != nil {
		return a.c.unavailable(ctx, err, "update record"), false
	}
	a.rev = rev
	return Outcome{}, true
}

func isRevisionConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) || store.IsWrongLastSequence(err)
}

// changedSinceRecorded reports whether the story head was written after
// this attempt's record: by the store's timestamps of both, never the
// bus's clock, so that a bus whose clock differs from the store's does not
// see every recent head as written during its attempt (or none).
func (a *attempt) changedSinceRecorded(ctx context.Context, head Head) (bool, error) {
	if a.recorded.IsZero() {
		cctx, cancel := context.WithTimeout(ctx, a.c.opTimeout)
		entry, err := a.c.ws.Records.GetRevision(cctx, a.key, a.rev)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// The record was rewritten since: it is not this attempt's
			// any more, so the story was not left as it found it.
			return true, nil
		case err != nil:
			return false, err
		}
		a.recorded = entry.Created()
	}
	return head.Time.After(a.recorded), nil
}

// publish sends the message to the topic, with a compare-and-swap on the
// story head for snapshots.
func (a *attempt) publish(ctx context.Context) (*jetstream.PubAck, error) {
	// The header's values share one array: one allocation, not one per
	// header, on every publish.
	keys := [...]string{nats.MsgIdHdr, HeaderMessageType, HeaderSystemID, HeaderSequence, HeaderState, HeaderOwner}
	values := []string{a.msg.MessageID, a.msg.MessageType, a.msg.SystemID, "", "", ""}
	n := 3
	if a.snapshot {
		values[3], values[4], values[5] = strconv.FormatInt(a.msg.SequenceNumber, 10), a.msg.State, a.decision.Owner
		n = 6
	}
	m := &nats.Msg{Subject: a.subject, Data: a.msg.Raw, Header: make(nats.Header, n+1)}
	for i := range n {
		m.Header[keys[i]] = values[i : i+1 : i+1]
	}
	// The compare-and-swap on the story head, unless a sole writer learnt
	// the head from its own acknowledgement (soleHead).
	if a.snapshot && !a.c.soleHead(a.head) {
		m.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(a.head.SubjectSeq, 10)}
	}
	t0 := time.Now()
	a.sent = true
	ack, err := a.c.pub.PublishMsg(ctx, m)
	a.c.observe("publish", time.Since(t0))
	return ack, err
}

// published updates the head cache of a snapshot, or marks the record of
// another message off the answer's critical path. A snapshot's record is
// not marked: its story subject proves its publication, which saves a
// durable write per snapshot.
func (a *attempt) published(ack *jetstream.PubAck) {
	if !a.snapshot {
		a.c.mark(a.msg.MessageID, a.key, a.rev, a.hash, statePublished)
		return
	}
	if ack != nil && !ack.Duplicate {
		a.c.heads.put(a.msg.StoryID, Head{
			Exists: true, SubjectSeq: ack.Sequence, SequenceNumber: a.msg.SequenceNumber,
			State: a.msg.State, Owner: a.decision.Owner, MessageID: a.msg.MessageID,
			acked: time.Now().Round(0), // the wall clock, as the store's retention
		})
		a.settled = true
	}
}

// soleHead reports whether h is a head this sole writer may publish over
// without the store's compare-and-swap: one it learnt from its own
// acknowledgement, not so long ago that the topic's retention may have
// dropped the message since. Any other head is confirmed by the store.
func (c *Core) soleHead(h Head) bool {
	return c.sole && !h.acked.IsZero() && !c.aged(h)
}

// aged reports whether h's message is older than half the topic's
// retention: the topic may drop it before the cache would notice.
func (c *Core) aged(h Head) bool {
	return c.retention > 0 && h.Exists && time.Since(h.written()) >= c.retention/2
}

// publishFailed handles a failed publish. A definite failure (the store
// answered no) removes the record so the retry is checked as new; an
// unknown outcome (a timeout) leaves it to the lease and the topic's
// duplicate window.
func (a *attempt) publishFailed(ctx context.Context, err error) Outcome {
	a.c.log.WarnContext(ctx, "publish failed", "workspace", a.c.ws.ID, "messageID", a.msg.MessageID, "error", err)
	if isDefinite(err) {
		a.remove(ctx)
	}
	return a.retryLater(rules.BusPublishFailed, "the message was not published; retry with the same message_id and body", time.Second)
}

func isDefinite(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, errInjected)
}

// errInjected marks a failure injected at a fault point as definite.
var errInjected = errors.New("injected fault")

// remove deletes this attempt's record, guarded by its revision. A failure
// leaves the record to its lease.
func (a *attempt) remove(ctx context.Context) {
	if err := a.c.fault(ctx, FaultRemove, a.msg.MessageID); err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, a.c.opTimeout)
	defer cancel()
	if err := a.c.ws.Records.Delete(cctx, a.key, jetstream.LastRevision(a.rev)); err != nil {
		a.c.log.WarnContext(cctx, "removing record failed", "workspace", a.c.ws.ID, "messageID", a.msg.MessageID, "error", err)
	}
}

// existing answers a message whose message_id has a record.
func (a *attempt) existing(ctx context.Context, entry jetstream.KeyValueEntry) Outcome {
	var rec record
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		return a.c.unavailable(ctx, err, "decode record")
	}
	if rec.Hash != a.hash {
		return refuse(rules.New(rules.MessageIDReused, "this message_id was used for a different message", "/message_id"))
	}
	switch rec.State {
	case statePublished:
		return Outcome{Status: http.StatusOK, Duplicate: true}
	case stateSuperseded:
		return refuse(rules.New(rules.MessageSuperseded, "the story accepted a newer snapshot since this one was recorded; it is not delivered", "/payload/sequence_number"))
	}
	if a.snapshot {
		// A snapshot's record is never marked: the story subject proves
		// whether it was published.
		published, head, err := a.c.snapshotPublished(ctx, a.subject, a.msg, rec.After)
		if err != nil {
			return a.c.unavailable(ctx, err, "read story")
		}
		if published {
			return Outcome{Status: http.StatusOK, Duplicate: true}
		}
		a.head = head
	} else if _, ok := a.c.marking.Load(a.key); ok {
		return Outcome{Status: http.StatusOK, Duplicate: true}
	}
	// The record's age on the store's clock, which stamped it.
	cctx, cancel := context.WithTimeout(ctx, a.c.opTimeout)
	now, err := a.c.storeNow.StoreNow(cctx)
	cancel()
	if err != nil {
		return a.c.unavailable(ctx, err, "read the store's time")
	}
	if age := now.Sub(entry.Created()); age < Lease {
		return a.retryLater(rules.MessageInFlight,
			"an earlier attempt of this message was recorded "+age.Round(time.Millisecond).String()+" ago and is not confirmed published yet",
			Lease-age)
	}
	// Take the record over: only one retry can win this compare-and-swap.
	cctx, cancel = context.WithTimeout(ctx, a.c.opTimeout)
	rev, err := a.c.ws.Records.Update(cctx, a.key, a.recordValue(), entry.Revision())
	cancel()
	if isRevisionConflict(err) {
		return a.retryLater(rules.MessageInFlight, "another retry of this message is publishing it", time.Second)
	}
	if err != nil {
		return a.c.unavailable(ctx, err, "take over record")
	}
	a.rev = rev
	if a.snapshot {
		if out, done := a.supersededBy(ctx, a.head); done {
			return out
		}
		// The owner is decided as for a first attempt (hand-offs and owner
		// rules apply); a republication reports no policy warnings.
		a.decision = Decision{Owner: a.head.Owner}
		if a.in.Policy != nil {
			a.decision = a.in.Policy(a.head)
		}
		if a.decision.Owner == "" {
			a.decision.Owner = a.msg.SystemID
		}
	}
	return a.commit(ctx, true)
}

// supersededBy ends a republication when the story head shows the message
// already published, or a newer snapshot accepted since.
func (a *attempt) supersededBy(ctx context.Context, head Head) (Outcome, bool) {
	switch {
	case head.MessageID == a.msg.MessageID:
		return Outcome{Status: http.StatusOK, Duplicate: true}, true
	case head.Exists && (head.SequenceNumber >= a.msg.SequenceNumber || head.State == StateKilled):
		a.c.mark(a.msg.MessageID, a.key, a.rev, a.hash, stateSuperseded)
		return refuse(rules.New(rules.MessageSuperseded, "the story accepted a newer snapshot since this one was recorded; it is not delivered", "/payload/sequence_number")), true
	}
	return Outcome{}, false
}

// mark writes the record's final state in the background, guarded by the
// revision this attempt owns.
func (c *Core) mark(id, key string, rev uint64, hash, state string) {
	c.marking.Store(key, struct{}{})
	c.marks.Add(1)
	go func() {
		defer c.marks.Done()
		defer c.marking.Delete(key)
		ctx, cancel := context.WithTimeout(context.Background(), c.opTimeout)
		defer cancel()
		if err := c.fault(ctx, FaultMark, id); err != nil {
			return
		}
		t0 := time.Now()
		_, err := c.ws.Records.Update(ctx, key, encodeRecord(hash, state, nil), rev)
		c.observe("record_mark", time.Since(t0))
		if err != nil {
			c.log.Warn("marking record failed; the lease covers it", "workspace", c.ws.ID, "key", key, "state", state, "error", err)
		}
	}()
}

func (c *Core) getRecord(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	entry, err := c.ws.Records.Get(cctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	return entry, err
}

// fault calls the fault hook. Any error but ErrStop becomes a definite,
// injected failure.
func (c *Core) fault(ctx context.Context, p FaultPoint, id string) error {
	if c.faults == nil {
		return nil
	}
	err := c.faults(ctx, p, id)
	if err == nil || errors.Is(err, ErrStop) {
		return err
	}
	return errors.Join(errInjected, err)
}

func (c *Core) unavailable(ctx context.Context, err error, op string) Outcome {
	c.log.ErrorContext(ctx, "record store unavailable", "workspace", c.ws.ID, "op", op, "error", err)
	v := rules.New(rules.RegistryUnavailable, "the record store is unreachable; nothing was published", "")
	return Outcome{Status: rules.Status(v.Rule), Refusal: &v, RetryAfter: time.Second}
}

func (a *attempt) retryLater(rule, message string, after time.Duration) Outcome {
	v := rules.New(rule, message, "")
	return Outcome{Status: rules.Status(rule), Refusal: &v, RetryAfter: after}
}

// refuseDecided answers a refusal from evaluate: the policy's own status
// for its refusals (a workspace rule declares its status), the catalogue's
// otherwise.
func (a *attempt) refuseDecided(v *rules.Violation) Outcome {
	out := refuse(*v)
	if v == a.decision.Refusal && a.decision.Status != 0 {
		out.Status = a.decision.Status
	}
	return out
}

func refuse(v rules.Violation) Outcome {
	return Outcome{Status: rules.Status(v.Rule), Refusal: &v}
}
