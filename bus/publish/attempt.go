package publish

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// attempt carries one publish through the core: check, record, publish,
// mark (docs/publish-core.md, "Publishing a message").
type attempt struct {
	c        *Core
	in       Input
	msg      *som.Message
	key      string
	hash     string
	subject  string
	snapshot bool
	// story is a snapshot's turn on its story (nil for other families):
	// where its head comes from, and how its publish follows it.
	story turn
	// recorded is the store's timestamp of this attempt's record, read
	// when a contention must be told from a stale view.
	recorded time.Time
	// confirmed is set once the record was read from the records
	// bucket's leader after a refused takeover.
	confirmed bool
	head      Head
	rev       uint64
	// after is the After of this attempt's record (snapshots only).
	after    uint64
	decision Decision
	seqWarn  []rules.Violation
}

func (a *attempt) run(ctx context.Context) Outcome {
	// Stages 11 and 12 are checked before recording, so a refused message
	// costs no write. Stage 10 still comes first: an existing record for
	// the message_id decides before any refusal.
	if a.snapshot {
		h, err := a.story.head(ctx)
		if err != nil {
			return a.c.unavailable(ctx, err, "read story head")
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
	if store.IsConflict(err) {
		entry, err := a.c.getRecord(ctx, a.key)
		if err == nil && entry == nil {
			// The bucket's leader holds a record that the replica read
			// does not show yet.
			entry, err = a.c.confirmRecord(ctx, a.key)
		}
		if err != nil {
			return a.c.unavailable(ctx, err, "read record")
		}
		if entry == nil { // removed in between: the other attempt failed
			return retryLater(rules.MessageInFlight, "an earlier attempt of this message was just removed; retry", time.Second)
		}
		return a.existing(ctx, entry)
	}
	if store.IsFull(err) {
		return a.recordsFull(ctx, err)
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

// recordsFull refuses a message whose record the records bucket, at its
// bound, would not write: the records the pooled workspaces share are at
// the bound the pools on the cluster set (docs/pools.md). Nothing was
// published for it, every record held stays, and room comes back as
// records age out.
func (a *attempt) recordsFull(ctx context.Context, err error) Outcome {
	a.c.log.WarnContext(ctx, "records full", "workspace", a.c.ws.ID, "messageID", a.msg.MessageID, "error", err)
	return refuse(rules.New(rules.WorkspaceStorageFull, "the idempotency records the pooled workspaces share on this cluster are at their storage limit; the message was not published; keep it and retry with the same message_id and body later", ""))
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
	a.decide()
	return a.decision.Refusal
}

// decide asks the workspace policy over the current head. The story's
// owner after this snapshot is the policy's; when it names none, the
// story keeps its owner, and a new story's is the sender: one rule for a
// first attempt and a takeover alike.
func (a *attempt) decide() {
	a.decision = Decision{}
	if a.in.Policy != nil {
		a.decision = a.in.Policy(a.head)
	}
	if a.decision.Owner == "" {
		a.decision.Owner = cmp.Or(a.head.Owner, a.msg.SystemID)
	}
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
				return duplicate()
			}
			tolerated := append([]rules.Violation{}, a.in.Warnings...)
			if !republish {
				tolerated = append(append(tolerated, a.seqWarn...), a.decision.Warnings...)
			}
			return Outcome{Tolerated: tolerated}
		}
		if !a.snapshot || !store.IsConflict(err) {
			return a.publishFailed(ctx, err)
		}
		if try > 0 && !republish {
			// This try followed the head the topic's leader gave: another
			// writer published on the story since, during this attempt.
			return a.contention(ctx)
		}
		// The story's last message is not the head decided over. That head
		// came from the cache or from a replica of the topic (a direct
		// get), and either may be behind the leader that checked the
		// compare-and-swap: the leader says what the head is.
		fresh, rerr := a.story.confirm(ctx)
		if rerr != nil {
			return a.c.unavailable(ctx, rerr, "read story head")
		}
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
		if during {
			return a.contention(ctx)
		}
		// Only this process's view of the head was behind: re-decide.
		a.head = fresh
		if refusal := a.evaluate(); refusal != nil {
			a.remove(ctx)
			return a.refuseDecided(refusal)
		}
	}
}

// contention answers a snapshot that another writer raced: its record is
// removed, so that sending it again is checked as new.
func (a *attempt) contention(ctx context.Context) Outcome {
	a.remove(ctx)
	return refuse(rules.New(rules.CommitContention, "another writer changed the story at the same moment; nothing was recorded", "/payload/story_id"))
}

// rename rewrites this attempt's record to name the current head, guarded
// by the record's revision. It reports false, with the answer, when the
// record is no longer this attempt's or the store failed.
func (a *attempt) rename(ctx context.Context) (Outcome, bool) {
	cctx, cancel := context.WithTimeout(ctx, a.c.opTimeout)
	rev, err := a.c.ws.Records.Update(cctx, a.key, a.recordValue(), a.rev)
	cancel()
	if store.IsConflict(err) {
		return anotherRetryPublishing(), false
	}
	if store.IsFull(err) {
		// Nothing is published yet: the record goes (when the bucket
		// lets it), so that the retry is checked as new.
		a.remove(ctx)
		return a.recordsFull(ctx, err), false
	}
	if err != nil {
		return a.c.unavailable(ctx, err, "update record"), false
	}
	a.rev = rev
	return Outcome{}, true
}

// changedSinceRecorded reports whether the story head was written after
// this attempt's record: by the store's timestamps of both, never the
// bus's clock, so that a bus whose clock differs from the store's does not
// see every recent head as written during its attempt (or none). head is
// the topic leader's, and the record is read back from the records
// bucket's leader: a replica may not hold it yet.
func (a *attempt) changedSinceRecorded(ctx context.Context, head Head) (bool, error) {
	if a.recorded.IsZero() {
		cctx, cancel := context.WithTimeout(ctx, a.c.opTimeout)
		t0 := time.Now()
		entry, err := a.c.ws.RecordsLeader.GetRevision(cctx, a.key, a.rev)
		a.c.observe("leader_read", time.Since(t0))
		cancel()
		switch {
		case store.IsMissing(err):
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

// publish sends the message to the topic; a snapshot follows its head as
// its story's turn says (with the compare-and-swap, or without it).
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
	if a.snapshot {
		if seq, swap := a.story.sending(a.head); swap {
			m.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(seq, 10)}
		}
	}
	t0 := time.Now()
	ack, err := a.c.pub.PublishMsg(ctx, m)
	a.c.observe("publish", time.Since(t0))
	return ack, err
}

// published tells a snapshot's story its new head, or marks the record of
// another message off the answer's critical path. A snapshot's record is
// not marked: its story subject proves its publication, which saves a
// durable write per snapshot.
func (a *attempt) published(ack *jetstream.PubAck) {
	if !a.snapshot {
		a.c.mark(a.msg.MessageID, a.key, a.rev, a.hash, statePublished)
		return
	}
	if ack != nil && !ack.Duplicate {
		a.story.acked(Head{
			Exists: true, SubjectSeq: ack.Sequence, SequenceNumber: a.msg.SequenceNumber,
			State: a.msg.State, Owner: a.decision.Owner, MessageID: a.msg.MessageID,
		})
	}
}

// publishFailed handles a failed publish. One that wrote nothing (the
// store answered no, a full topic among them) removes the record so the
// retry is checked as new; one that may have landed (a timeout) leaves it
// to the lease and the topic's duplicate window.
func (a *attempt) publishFailed(ctx context.Context, err error) Outcome {
	if store.IsFull(err) {
		// The topic refused the message and kept everything it held
		// (discard new): the record goes, so that the same message sent
		// once the limit is raised is checked as new, and no story head
		// moved.
		a.remove(ctx)
		return a.topicFull(ctx, err)
	}
	if store.IsPublishInProcess(err) {
		// Another retry is publishing the same message id: the record
		// stays, and the next retry finds what it did.
		return anotherRetryPublishing()
	}
	a.c.log.WarnContext(ctx, "publish failed", "workspace", a.c.ws.ID, "messageID", a.msg.MessageID, "error", err)
	if !store.MayHaveLanded(err) {
		a.remove(ctx)
	}
	return retryLater(rules.BusPublishFailed, "the message was not published; retry with the same message_id and body", time.Second)
}

// topicFull refuses a message the workspace's topic, at its limit
// (discard new), would not store; the topic kept everything it held.
func (a *attempt) topicFull(ctx context.Context, err error) Outcome {
	a.c.log.WarnContext(ctx, "topic full", "workspace", a.c.ws.ID, "messageID", a.msg.MessageID, "error", err)
	return refuse(rules.New(rules.WorkspaceStorageFull, "the workspace's topic is at its storage limit; the message was not published; keep it and retry with the same message_id and body once the platform has raised the limit", ""))
}

// remove deletes this attempt's record, guarded by its revision. A failure
// leaves the record to its lease.
func (a *attempt) remove(ctx context.Context) {
	if err := a.c.fault(ctx, FaultRemove, a.msg.MessageID); err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, a.c.opTimeout)
	defer cancel()
	if err := a.c.ws.RemoveRecord(cctx, a.key, a.rev); err != nil {
		a.c.log.WarnContext(cctx, "removing record failed", "workspace", a.c.ws.ID, "messageID", a.msg.MessageID, "error", err)
	}
}

// existing answers a message whose message_id has a record.
func (a *attempt) existing(ctx context.Context, entry jetstream.KeyValueEntry) Outcome {
	rec, err := decodeRecord(entry.Value())
	if err != nil {
		return a.c.unavailable(ctx, err, "decode record")
	}
	if rec.Hash != a.hash {
		return refuse(rules.New(rules.MessageIDReused, "this message_id was used for a different message", "/message_id"))
	}
	switch rec.State {
	case statePublished:
		return duplicate()
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
		a.story.seen(head)
		if published {
			return duplicate()
		}
		a.head = head
	} else if _, ok := a.c.marking.Load(a.key); ok {
		return duplicate()
	}
	// The record's age on the store's clock, which stamped it.
	cctx, cancel := context.WithTimeout(ctx, a.c.opTimeout)
	now, err := a.c.storeNow.StoreNow(cctx)
	cancel()
	if err != nil {
		return a.c.unavailable(ctx, err, "read the store's time")
	}
	if age := now.Sub(entry.Created()); age < Lease {
		return retryLater(rules.MessageInFlight,
			"an earlier attempt of this message was recorded "+age.Round(time.Millisecond).String()+" ago and is not confirmed published yet",
			Lease-age)
	}
	// Take the record over: only one retry can win this compare-and-swap.
	cctx, cancel = context.WithTimeout(ctx, a.c.opTimeout)
	rev, err := a.c.ws.Records.Update(cctx, a.key, a.recordValue(), entry.Revision())
	cancel()
	if store.IsConflict(err) {
		return a.takeoverRefused(ctx, entry)
	}
	if store.IsFull(err) {
		return a.takeoverFull(ctx, entry, err)
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
		a.decide()
	}
	return a.commit(ctx, true)
}

// anotherRetryPublishing answers a retry that found another retry of
// the same message publishing it: 503 message.in_flight, to be retried in
// a second, when the other's outcome decides it.
func anotherRetryPublishing() Outcome {
	return retryLater(rules.MessageInFlight, "another retry of this message is publishing it", time.Second)
}

// takeoverRefused answers a takeover of the record read that the records
// bucket refused: another retry took the record over, or the record read
// was a replica's, behind the bucket's leader. The leader's record, when it
// is another revision, decides the retry as the record read would have,
// once: a second refusal is another retry's.
func (a *attempt) takeoverRefused(ctx context.Context, read jetstream.KeyValueEntry) Outcome {
	if !a.confirmed {
		a.confirmed = true
		entry, err := a.c.confirmRecord(ctx, a.key)
		if err != nil {
			return a.c.unavailable(ctx, err, "read record")
		}
		if entry != nil && entry.Revision() != read.Revision() {
			return a.existing(ctx, entry)
		}
	}
	return anotherRetryPublishing()
}

// takeoverFull answers a retry whose takeover the records bucket, at its
// bound, refused. On a replicated bucket the bound is checked before any
// write, so it also refuses the mark of the messages accepted last before
// it was full: such a record stays "recorded" although its message was
// published. A snapshot was not found on its story (existing): it is
// superseded, or refused like a new message. An event may be on the
// topic: it is published again under the record read, without owning it,
// and the topic's duplicate window on Nats-Msg-Id answers a duplicate if
// it was, as a republication after a lost mark does (docs/publish-core.md,
// "Failures"); its mark is then tried again, guarded by the revision
// read.
func (a *attempt) takeoverFull(ctx context.Context, entry jetstream.KeyValueEntry, err error) Outcome {
	a.rev = entry.Revision()
	if a.snapshot {
		if out, done := a.supersededBy(ctx, a.head); done {
			return out
		}
		return a.recordsFull(ctx, err)
	}
	ack, err := a.publish(ctx)
	switch {
	case store.IsFull(err):
		return a.topicFull(ctx, err)
	case store.IsPublishInProcess(err):
		// Retries taking the same record over at the bound publish at
		// once: a replicated topic lets one through and answers the
		// others so; the next retry is a duplicate.
		return anotherRetryPublishing()
	case err != nil:
		// The record read is left to the attempt it belongs to: this
		// one did not take it over.
		a.c.log.WarnContext(ctx, "publish failed", "workspace", a.c.ws.ID, "messageID", a.msg.MessageID, "error", err)
		return retryLater(rules.BusPublishFailed, "the message was not published; retry with the same message_id and body", time.Second)
	}
	a.published(ack)
	if ack.Duplicate {
		return duplicate()
	}
	return Outcome{Tolerated: append([]rules.Violation{}, a.in.Warnings...)}
}

// supersededBy ends a republication when the story head shows the message
// already published, or a newer snapshot accepted since.
func (a *attempt) supersededBy(ctx context.Context, head Head) (Outcome, bool) {
	switch {
	case head.MessageID == a.msg.MessageID:
		return duplicate(), true
	case head.Exists && (head.SequenceNumber >= a.msg.SequenceNumber || head.State == StateKilled):
		a.c.mark(a.msg.MessageID, a.key, a.rev, a.hash, stateSuperseded)
		return refuse(rules.New(rules.MessageSuperseded, "the story accepted a newer snapshot since this one was recorded; it is not delivered", "/payload/sequence_number")), true
	}
	return Outcome{}, false
}

// refuseDecided answers a refusal from evaluate. The HTTP layer decides
// its status, a workspace rule's from the workspace's declaration.
func (a *attempt) refuseDecided(v *rules.Violation) Outcome { return refuse(*v) }
