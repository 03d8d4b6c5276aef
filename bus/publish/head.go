package publish

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// Headers the bus sets on every message it publishes. Snapshot headers make
// the story's last message on its subject the story head: no separate head
// record is written.
const (
	HeaderMessageType = "Storybus-Message-Type"
	HeaderSystemID    = "Storybus-System-Id"
	HeaderSequence    = "Storybus-Sequence"
	HeaderState       = "Storybus-State"
	HeaderOwner       = "Storybus-Owner"
)

// StateKilled is the terminal snapshot state.
const StateKilled = "killed"

// Head is what the bus knows of a story's latest accepted snapshot.
type Head struct {
	// Exists is false for a story with no accepted snapshot.
	Exists bool
	// SubjectSeq is the stream sequence of the head message: the expected
	// last subject sequence of the next snapshot's compare-and-swap.
	SubjectSeq uint64
	// SequenceNumber and State are the head snapshot's.
	SequenceNumber int64
	State          string
	// Owner is the story's owning system_id.
	Owner string
	// MessageID is the head snapshot's message_id.
	MessageID string
	// Time is when the head message was written: the server's timestamp
	// of a head read from the store, or the core's clock when its own
	// publish's acknowledgement arrived.
	Time time.Time
	// source says where the head came from.
	source headSource
}

// headSource says where a Head came from.
type headSource uint8

const (
	// headRead: read from the store, the story subject's last message (or
	// its absence). The zero value: a head of unknown origin is the
	// store's to confirm.
	headRead headSource = iota
	// headAcked: learnt from the topic's acknowledgement of this
	// process's own publish.
	headAcked
)

// CheckSequence applies SOM's snapshot-order rules to a snapshot with
// sequence number seq over the story head h.
func CheckSequence(h Head, seq int64) (refusal *rules.Violation, warnings []rules.Violation) {
	const path = "/payload/sequence_number"
	switch {
	case h.Exists && h.State == StateKilled:
		v := rules.New(rules.SequenceTerminal, "the story was killed (sequence_number "+strconv.FormatInt(h.SequenceNumber, 10)+") and accepts no more snapshots", path)
		return &v, nil
	case h.Exists && seq <= h.SequenceNumber:
		v := rules.New(rules.SequenceStale, "sequence_number must exceed the story's latest accepted "+strconv.FormatInt(h.SequenceNumber, 10), path)
		return &v, nil
	case h.Exists && seq > h.SequenceNumber+1:
		return nil, []rules.Violation{rules.New(rules.SequenceGap, "sequence_number jumps from "+strconv.FormatInt(h.SequenceNumber, 10)+" to "+strconv.FormatInt(seq, 10), path)}
	case !h.Exists && seq != 1:
		return nil, []rules.Violation{rules.New(rules.SequenceStart, "the story's first snapshot has sequence_number "+strconv.FormatInt(seq, 10)+", not 1", path)}
	}
	return nil, nil
}

// headFromMsg reads a story head from the story subject's last message.
func headFromMsg(m *jetstream.RawStreamMsg) Head {
	seq, _ := strconv.ParseInt(m.Header.Get(HeaderSequence), 10, 64)
	return Head{
		Exists:         true,
		SubjectSeq:     m.Sequence,
		SequenceNumber: seq,
		State:          m.Header.Get(HeaderState),
		Owner:          m.Header.Get(HeaderOwner),
		MessageID:      m.Header.Get(nats.MsgIdHdr),
		Time:           m.Time,
	}
}

// readHead reads a story's head from the store with a direct get, which
// any replica of the topic answers: on a cluster, possibly one behind the
// leader (store/leader.go), which the publish's compare-and-swap then
// refuses.
func (c *Core) readHead(ctx context.Context, subject string) (Head, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	return headFrom(c.ws.Stream.GetLastMsgForSubject(ctx, subject))
}

// confirmHead reads a story's head from the topic's leader, which checks
// the compare-and-swap: after the topic refused a publish over a head
// that the cache or a replica gave, this is the head as the store has it.
func (c *Core) confirmHead(ctx context.Context, subject string) (Head, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	t0 := time.Now()
	m, err := c.ws.StreamLeader.LastMsgForSubject(ctx, subject)
	c.observe("leader_read", time.Since(t0))
	return headFrom(m, err)
}

// headFrom is the head a read of the story subject's last message gives.
func headFrom(m *jetstream.RawStreamMsg, err error) (Head, error) {
	if store.IsMissing(err) {
		return Head{}, nil
	}
	if err != nil {
		return Head{}, err
	}
	return headFromMsg(m), nil
}

// snapshotPublished reports whether the snapshot msg was published on its
// story subject, and returns the story's current head. Sequence numbers grow
// along a story subject, so a published snapshot is the head, or lies
// before the first message with a larger sequence number. Its record names
// the head its publication followed (after): the publish's compare-and-swap,
// or the sole writer's serialising, put it directly after that head, so the
// first message on the subject past after is the snapshot if it was
// published at all. Two reads, however long the story.
func (c *Core) snapshotPublished(ctx context.Context, subject string, msg *som.Message, after *uint64) (bool, Head, error) {
	head, err := c.readHead(ctx, subject)
	if err != nil {
		return false, Head{}, err
	}
	switch {
	case head.MessageID == msg.MessageID:
		return true, head, nil
	case !head.Exists || head.SequenceNumber <= msg.SequenceNumber:
		return false, head, nil
	case after == nil:
		return c.walkStory(ctx, subject, msg, head)
	}
	m, err := c.firstAfter(ctx, subject, *after)
	if err != nil || m == nil {
		return false, head, err
	}
	return m.Header.Get(nats.MsgIdHdr) == msg.MessageID, head, nil
}

// firstAfter reads the first message on subject past stream sequence
// after: the snapshot a record naming that head proves, if it was
// published. It returns nil when there is none.
func (c *Core) firstAfter(ctx context.Context, subject string, after uint64) (*jetstream.RawStreamMsg, error) {
	cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	m, err := c.ws.Stream.GetMsg(cctx, after+1, jetstream.WithGetMsgSubject(subject))
	if store.IsMissing(err) {
		return nil, nil
	}
	return m, err
}

// walkStory looks for msg on its story subject message by message, for a
// record written before records named the head they follow: one read per
// message, up to the first snapshot at or past msg's sequence number.
func (c *Core) walkStory(ctx context.Context, subject string, msg *som.Message, head Head) (bool, Head, error) {
	for next := uint64(1); ; {
		cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
		m, err := c.ws.Stream.GetMsg(cctx, next, jetstream.WithGetMsgSubject(subject))
		cancel()
		if store.IsMissing(err) {
			return false, head, nil
		}
		if err != nil {
			return false, head, err
		}
		if m.Header.Get(nats.MsgIdHdr) == msg.MessageID {
			return true, head, nil
		}
		seq, _ := strconv.ParseInt(m.Header.Get(HeaderSequence), 10, 64)
		if seq >= msg.SequenceNumber || m.Sequence >= head.SubjectSeq {
			return false, head, nil
		}
		next = m.Sequence + 1
	}
}
