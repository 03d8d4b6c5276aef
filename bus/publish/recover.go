package publish

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
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
	// Records is how many records were read ahead of them, from the
	// records bucket's stream, in RecordsTook.
	Records     int
	RecordsTook time.Duration
	// Alone is how many messages needed a read of their own: a record
	// not read ahead, or a snapshot's story before the topic read.
	Alone int
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

// recoverBatch is how many messages a recovery fetches at a time.
const recoverBatch = 1024

// recordsLead is how much earlier than the topic the records bucket is
// read: a record is written before its message is published, within a
// publish's store operations. A message whose record is older than that
// is not missed, only read on its own.
const recordsLead = 10 * time.Second

// Recover rebuilds the records a crash may have lost, before the workspace
// takes its first publish. On the embedded store the records bucket is
// flushed asynchronously (store.Workspace.RecordsLossWindow), so a process
// killed just after a publish can come back with the message in the topic,
// fsynced, and without its record. The topic is the truth: Recover reads
// every message it stored in the loss window before its last message, and
// gives each message without a record the record `published` with the
// hash of its content, so that a retry of it is answered 200 duplicate, as
// before the crash, however late it comes and whatever its story did
// since. It does nothing when the records bucket is durable when
// acknowledged.
//
// It reads two streams in order, in batches, rather than each message's
// record on its own: the records bucket's latest records, from a little
// before the window, then the topic's window, headers only. A message
// whose record is not among those read (a record lost, or written long
// before its message) has its record read on its own, and its body when
// it needs a record, as before; what is decided for each message is the
// same.
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
	started := time.Now()
	known, err := c.latestRecords(ctx, from.Add(-recordsLead))
	if err != nil {
		return rec, fmt.Errorf("read the records: %w", err)
	}
	rec.Records, rec.RecordsTook = len(known), time.Since(started)
	seen := &subjectsSeen{last: map[string]uint64{}}
	err = c.scan(ctx, c.ws.Stream, "storybus: rebuilding records at start", from, topic.State.LastSeq, true, func(m jetstream.Msg, seq uint64) error {
		rec.Messages++
		if seen.first == 0 {
			seen.first = seq
		}
		if err := c.recoverMessage(ctx, m, seq, known, seen, &rec); err != nil {
			return fmt.Errorf("recover the record of stream sequence %d: %w", seq, err)
		}
		seen.last[m.Subject()] = seq
		return nil
	})
	if err != nil {
		return rec, fmt.Errorf("read the topic: %w", err)
	}
	return rec, nil
}

// knownRecord is a record as the records bucket's stream holds it: its
// value and its revision (its stream sequence).
type knownRecord struct {
	value    []byte
	revision uint64
}

// recordsAhead bounds the records a recovery holds in memory, about 50
// MB: with a long --sync-interval and a fast topic the window can hold
// more. Past it, the messages left have their records read on their own.
var recordsAhead = 200_000

// latestRecords reads the records bucket's stream from since to its end,
// or its first recordsAhead records: each key's latest record (the bucket
// keeps one a key). Delete and purge markers are left out, so that such a
// key is read on its own.
func (c *Core) latestRecords(ctx context.Context, since time.Time) (map[string]knownRecord, error) {
	known := map[string]knownRecord{}
	if c.ws.RecordsStream == nil {
		return known, nil
	}
	info, err := c.ws.RecordsStream.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs == 0 {
		return known, nil
	}
	prefix := c.ws.RecordsSubjects
	err = c.scan(ctx, c.ws.RecordsStream, "storybus: reading records at start", since, info.State.LastSeq, false, func(m jetstream.Msg, seq uint64) error {
		key, ok := strings.CutPrefix(m.Subject(), prefix)
		if !ok || m.Headers().Get("KV-Operation") != "" || m.Headers().Get(jetstream.MarkerReasonHeader) != "" {
			return nil
		}
		known[key] = knownRecord{value: m.Data(), revision: seq}
		if len(known) >= recordsAhead {
			return errEnough
		}
		return nil
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	return known, err
}

// errEnough stops a scan that has read all it needs.
var errEnough = errors.New("read enough")

// scan reads stream from the server timestamp from to its sequence last
// (or its end, if messages were removed meanwhile), calling each with
// every message and its stream sequence; headersOnly leaves the bodies
// out.
func (c *Core) scan(ctx context.Context, stream jetstream.Stream, description string, from time.Time, last uint64, headersOnly bool, each func(jetstream.Msg, uint64) error) error {
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:       description,
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &from,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       headersOnly,
		MemoryStorage:     true,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opTimeout)
		defer cancel()
		_ = stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	if cons.CachedInfo().NumPending == 0 {
		return nil
	}
	for {
		batch, err := cons.Fetch(recoverBatch, jetstream.FetchMaxWait(c.opTimeout))
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			if err := each(m, meta.Sequence.Stream); err != nil {
				return err
			}
			if meta.Sequence.Stream >= last || meta.NumPending == 0 {
				return nil
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if n == 0 {
			// Nothing came within the wait: done only if nothing is left
			// (the last message was removed meanwhile, by age or limits).
			info, err := cons.Info(ctx)
			if err != nil {
				return err
			}
			if info.NumPending == 0 {
				return nil
			}
		}
	}
}

// subjectsSeen is what a recovery has read of the topic so far: the first
// stream sequence it read, and the last it read on each subject. It reads
// every message from the first on, in order.
type subjectsSeen struct {
	first uint64
	last  map[string]uint64
}

// firstAfter reports whether the message at seq, on subject, being read
// now, is the first message on subject past after: known is false when
// the read began too late to tell (past after+1), and the topic must be
// asked.
func (s *subjectsSeen) firstAfter(subject string, after, seq uint64) (first, known bool) {
	if s == nil || s.first == 0 || after+1 < s.first {
		return false, false
	}
	if after >= seq {
		return false, true
	}
	// Every message on subject from after+1 on was read, up to the one
	// before seq: the last of them is past after if one came between.
	prev, ok := s.last[subject]
	return !ok || prev <= after, true
}

// recoverMessage gives one topic message, stored at stream sequence seq,
// the record it should have. m may hold its headers only; known are the
// records read ahead, seen the topic read so far.
func (c *Core) recoverMessage(ctx context.Context, m jetstream.Msg, seq uint64, known map[string]knownRecord, seen *subjectsSeen, rec *Recovery) error {
	id := m.Headers().Get(nats.MsgIdHdr)
	if id == "" {
		rec.Skipped++
		return nil
	}
	key := store.EncodeToken(id)
	value, revision, found := []byte(nil), uint64(0), false
	if k, ok := known[key]; ok {
		value, revision, found = k.value, k.revision, true
	} else {
		rec.Alone++
		entry, err := c.getRecord(ctx, key)
		if err != nil {
			return err
		}
		if entry != nil {
			value, revision, found = entry.Value(), entry.Revision(), true
		}
	}
	if found {
		r, err := decodeRecord(value)
		if err != nil || r.State != stateRecorded {
			return nil
		}
		if m.Headers().Get(HeaderMessageType) == som.TypeStoryContext {
			// A snapshot's record proves its publication by naming the
			// head the publication followed. A crash can have lost the
			// rewrite that named the head it was last published after;
			// then the record, as it is, would not prove it.
			proved, err := c.recordProves(ctx, r.After, m.Subject(), seq, seen, rec)
			if err != nil || proved {
				return err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
		defer cancel()
		if _, err := c.ws.Records.Update(cctx, key, encodeRecord(r.Hash, statePublished, nil), revision); err != nil && !store.IsConflict(err) {
			return err
		}
		rec.Marked++
		return nil
	}
	body := m.Data()
	if len(body) == 0 {
		// Read with its headers only: the body, to hash it.
		cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
		defer cancel()
		raw, err := c.ws.Stream.GetMsg(cctx, seq)
		if store.IsMissing(err) {
			// Removed since (by age or limits): no retry can need it.
			return nil
		}
		if err != nil {
			return err
		}
		body = raw.Data
	}
	msg, err := som.Parse(body)
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
// by walking the story, which needs no rewrite either. What the recovery
// has read of the topic answers when it reaches back to after; otherwise
// the topic is asked.
func (c *Core) recordProves(ctx context.Context, after *uint64, subject string, seq uint64, seen *subjectsSeen, rec *Recovery) (bool, error) {
	if after == nil {
		return true, nil
	}
	if first, known := seen.firstAfter(subject, *after, seq); known {
		return first, nil
	}
	rec.Alone++
	first, err := c.firstAfter(ctx, subject, *after)
	if err != nil || first == nil {
		return false, err
	}
	return first.Sequence == seq, nil
}
