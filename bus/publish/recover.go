package publish

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	// `published` (events and asset references: a lost mark).
	Marked int
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
	cons, err := c.ws.Stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime:  &from,
	})
	if err != nil {
		return rec, fmt.Errorf("read the topic: %w", err)
	}
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
			if err := c.recoverMessage(ctx, m, &rec); err != nil {
				return rec, fmt.Errorf("recover the record of stream sequence %d: %w", meta.Sequence.Stream, err)
			}
			if meta.Sequence.Stream >= last {
				return rec, nil
			}
		}
		if err := batch.Error(); err != nil {
			return rec, fmt.Errorf("read the topic: %w", err)
		}
		if n == 0 {
			// The topic's last message was removed while it was read
			// (its age or limits): nothing after it is left to read.
			return rec, nil
		}
	}
}

// recoverMessage gives one topic message the record it should have.
func (c *Core) recoverMessage(ctx context.Context, m jetstream.Msg, rec *Recovery) error {
	id := m.Headers().Get(nats.MsgIdHdr)
	if id == "" {
		return nil
	}
	key := store.EncodeToken(id)
	entry, err := c.getRecord(ctx, key)
	if err != nil {
		return err
	}
	if entry != nil {
		var r record
		if json.Unmarshal(entry.Value(), &r) != nil || r.State != stateRecorded || m.Headers().Get(HeaderMessageType) == som.TypeStoryContext {
			// A snapshot's record is never marked: its story subject
			// proves its publication.
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
		defer cancel()
		if _, err := c.ws.Records.Update(cctx, key, encodeRecord(r.Hash, statePublished, nil), entry.Revision()); err != nil && !isRevisionConflict(err) {
			return err
		}
		rec.Marked++
		return nil
	}
	msg, err := som.Parse(m.Data())
	if err != nil {
		// The topic only holds messages the bus accepted.
		return fmt.Errorf("parse the stored message: %w", err)
	}
	sum, err := msg.ContentHash()
	if err != nil {
		return fmt.Errorf("hash the stored message: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	_, err = c.ws.Records.Create(cctx, key, encodeRecord(hex.EncodeToString(sum[:]), statePublished, nil))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil
	}
	if err != nil {
		return err
	}
	rec.Rebuilt++
	return nil
}
