package publish

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
)

// Recovery says what Recover found.
type Recovery struct {
	// From is the server timestamp the topic was read from.
	From time.Time
	// Messages is how many topic messages were read.
	Messages int
	// Rebuilt is how many of them had no record, and have one now.
	Rebuilt int
	// Marked is how many had a record still `recorded` that is now marked
	// `published`: an event's or asset reference's lost mark, or a
	// snapshot's record whose last rewrite was lost.
	Marked int
	// Skipped is how many were not messages the bus publishes (no
	// message_id, or not SOM): something else wrote to the topic.
	Skipped int
}

// recoverBatch is how many topic messages a recovery fetches at a time.
const recoverBatch = 256

// Recover rebuilds the records a crash may have lost, before the workspace
// takes its first publish. On the embedded store the records bucket is
// flushed asynchronously (store.Workspace.RecordsLossWindow), so a process
// killed just after a publish can come back with the message in the topic,
// fsynced, and without its record. The topic is the truth: Recover reads
// every message it stored in the loss window before its last message, and gives each message without a record the record
// `published` with the hash of its content, so that a retry of it is
// answered 200 duplicate, as before the crash, however late it comes and
// whatever its story did since. It does nothing when the records bucket
// is durable when acknowledged.
func (c *Core) Recover(ctx context.Context) (Recovery, error) {
	window := c.ws.RecordsLossWindow
	if window <= 0 {
		return Recovery{}, nil
	}
	topic, err := c.ws.Stream.Info(ctx)
	if err != nil {
		return Recovery{}, fmt.Errorf("read the topic's state: %w", err)
	}
	if topic.State.Msgs == 0 {
		return Recovery{}, nil
	}
	last := topic.State.LastSeq
	// Records are lost only as the tail of the records bucket's log (a
	// killed process loses the writes it had not flushed, a few
	// milliseconds' worth) or, after a power loss, as those written since
	// the store's last fsync of the bucket: within the window before the
	// crash. A message is written after its record, and the topic's last
	// message is no later than the crash, so every message whose record
	// may be lost is stamped within the window before the topic's last
	// message. Reading no further back keeps every start bounded, however
	// long the topic.
	from := topic.State.LastTime.Add(-window - time.Second)
	rec := Recovery{From: from}
	cons, err := c.ws.Stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:       "storybus: rebuilding records at start",
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &from,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return rec, fmt.Errorf("read the topic: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opTimeout)
		defer cancel()
		_ = c.ws.Stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	for {
		batch, err := cons.Fetch(recoverBatch, jetstream.FetchMaxWait(c.opTimeout))
		if err != nil {
			return rec, fmt.Errorf("read the topic: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			rec.Messages++
			meta, err := m.Metadata()
			if err != nil {
				return rec, fmt.Errorf("read the topic: %w", err)
			}
			if err := c.recoverMessage(ctx, m, meta.Sequence.Stream, &rec); err != nil {
				return rec, fmt.Errorf("recover the record of stream sequence %d: %w", meta.Sequence.Stream, err)
			}
			if meta.Sequence.Stream >= last || meta.NumPending == 0 {
				return rec, nil
			}
		}
		if err := batch.Error(); err != nil {
			return rec, fmt.Errorf("read the topic: %w", err)
		}
		if n == 0 {
			// Nothing came within the wait: done only if nothing is left
			// (the last message was removed meanwhile, by age or limits).
			info, err := cons.Info(ctx)
			if err != nil {
				return rec, fmt.Errorf("read the topic: %w", err)
			}
			if info.NumPending == 0 {
				return rec, nil
			}
		}
	}
}

// recoverMessage gives one topic message, stored at stream sequence seq,
// the record it should have.
func (c *Core) recoverMessage(ctx context.Context, m jetstream.Msg, seq uint64, rec *Recovery) error {
	id := m.Headers().Get(nats.MsgIdHdr)
	if id == "" {
		rec.Skipped++
		return nil
	}
	key := store.EncodeToken(id)
	entry, err := c.getRecord(ctx, key)
	if err != nil {
		return err
	}
	if entry != nil {
		r, err := decodeRecord(entry.Value())
		if err != nil || r.State != stateRecorded {
			return nil
		}
		if m.Headers().Get(HeaderMessageType) == som.TypeStoryContext {
			// A snapshot's record proves its publication by naming the
			// head the publication followed. A crash can have lost the
			// rewrite that named the head it was last published after;
			// then the record, as it is, would not prove it.
			proved, err := c.recordProves(ctx, r.After, m.Subject(), seq)
			if err != nil || proved {
				return err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
		defer cancel()
		if _, err := c.ws.Records.Update(cctx, key, encodeRecord(r.Hash, statePublished, nil), entry.Revision()); err != nil && !store.IsConflict(err) {
			return err
		}
		rec.Marked++
		return nil
	}
	msg, err := som.Parse(m.Data())
	if err != nil {
		// Not a message the bus accepted (something else wrote to the
		// topic): no retry of it can come, and it must not stop a start.
		rec.Skipped++
		return nil
	}
	sum, err := msg.ContentHash()
	if err != nil {
		rec.Skipped++
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	_, err = c.ws.Records.Create(cctx, key, encodeRecord(hex.EncodeToString(sum[:]), statePublished, nil))
	if store.IsConflict(err) {
		return nil
	}
	if err != nil {
		return err
	}
	rec.Rebuilt++
	return nil
}

// recordProves reports whether a snapshot record naming head after proves
// the snapshot stored at seq on subject: it is the first message on the
// subject past after. A record naming no head (an older bus's) is proved
// by walking the story, which needs no rewrite either.
func (c *Core) recordProves(ctx context.Context, after *uint64, subject string, seq uint64) (bool, error) {
	if after == nil {
		return true, nil
	}
	first, err := c.firstAfter(ctx, subject, *after)
	if err != nil || first == nil {
		return false, err
	}
	return first.Sequence == seq, nil
}
