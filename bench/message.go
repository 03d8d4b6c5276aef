package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus/som"
)

// SystemID is the system_id of every benchmark message and the name of the
// bus connection that publishes them.
const SystemID = "bench"

// message is one SOM 1.0 message ready to send: a story.context snapshot
// or a story.event.
type message struct {
	id    string
	story string
	body  []byte
}

// story is one story a producer owns and the last sequence_number it sent.
type story struct {
	id  string
	seq int64
}

// generator says what messages the producers of a phase make.
type generator struct {
	// systemID is the messages' system_id.
	systemID string
	// storyPrefix starts every story id; a run against a running bus
	// makes it unique, so that its stories are new.
	storyPrefix string
	// events makes one message in eventEvery a story.event about the
	// story last snapshotted; otherwise every message is a snapshot.
	events bool
}

// eventEvery is how often a producer with events sends one.
const eventEvery = 4

// producer makes the messages of one worker. It owns its stories alone, so
// no two workers ever write the same story and the bus sees no contention.
type producer struct {
	g       generator
	stories []story
	next    int
	sent    int
}

// newProducer returns the producer of worker w out of workers, owning the
// stories whose index modulo workers is w (at least one story).
func newProducer(w, workers, stories int, g generator) *producer {
	p := &producer{g: g}
	for i := w; i < stories; i += workers {
		p.stories = append(p.stories, story{id: g.storyID(i)})
	}
	if len(p.stories) == 0 {
		p.stories = append(p.stories, story{id: g.storyID(stories + w)})
	}
	return p
}

func (g generator) storyID(i int) string { return g.storyPrefix + strconv.Itoa(100000 + i)[1:] }

// message returns the next message, a fresh message_id every time: the
// producer's stories in turn, each one's sequence_number one above its
// previous snapshot, and with events every eventEvery-th message an event
// about the story snapshotted last.
func (p *producer) message() message {
	p.sent++
	id := uuid.NewString()
	if p.g.events && p.sent%eventEvery == 0 {
		s := p.stories[(p.next+len(p.stories)-1)%len(p.stories)]
		return message{id: id, story: s.id, body: event(id, p.g.systemID, s.id, s.seq, time.Now())}
	}
	s := &p.stories[p.next]
	p.next = (p.next + 1) % len(p.stories)
	s.seq++
	return message{id: id, story: s.id, body: Snapshot(id, p.g.systemID, s.id, s.seq, time.Now())}
}

// state walks a story through a realistic life: a draft, then published,
// then updates.
func state(seq int64) string {
	switch seq {
	case 1:
		return "draft"
	case 2:
		return "published"
	}
	return "updated"
}

// Snapshot returns a typical story.context of about 1.3 KB: a headline,
// slug, desk, language, body reference, assets, authors and labels, valid
// against SOM 1.0 with no warnings.
func Snapshot(id, systemID, storyID string, seq int64, now time.Time) []byte {
	n := strconv.FormatInt(seq, 10)
	b := make([]byte, 0, 1536)
	b = envelope(b, id, som.TypeStoryContext, systemID, now)
	b = append(b, `"payload":{"story_id":"`...)
	b = append(b, storyID...)
	b = append(b, `","sequence_number":`...)
	b = append(b, n...)
	b = append(b, `,"state":"`...)
	b = append(b, state(seq)...)
	b = append(b, `","headline":"Council approves new harbour bridge after late-night vote on the transport budget","slug":"council-harbour-bridge-`...)
	b = append(b, storyID...)
	b = append(b, `","desk":"local","language":"en-GB","body_ref":"https://cms.example/stories/`...)
	b = append(b, storyID...)
	b = append(b, `/revisions/`...)
	b = append(b, n...)
	b = append(b, `/body","assets":[`...)
	for i, kind := range []string{"image", "image", "video"} {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"ref":"https://media.example/assets/`...)
		b = append(b, storyID...)
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(i+1), 10)
		b = append(b, `","kind":"`...)
		b = append(b, kind...)
		b = append(b, `","caption":"Councillors vote on the harbour bridge in the chamber on Tuesday evening, seen from the public gallery"}`...)
	}
	b = append(b, `],"authors":["Ada Reporter","Ben Editor","Cleo Photographer"],"labels":["politics","local","transport","harbour","council","budget","infrastructure"]}}`...)
	return b
}

// envelope appends a message's envelope, up to its payload.
func envelope(b []byte, id, messageType, systemID string, now time.Time) []byte {
	b = append(b, `{"som_version":"1.0","message_id":"`...)
	b = append(b, id...)
	b = append(b, `","message_type":"`...)
	b = append(b, messageType...)
	b = append(b, `","system_id":"`...)
	b = append(b, systemID...)
	b = append(b, `","timestamp":"`...)
	b = now.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, `",`...)
}

// event returns a story.event of about 450 bytes about a story whose last
// snapshot had sequence number seq: published after its second snapshot,
// updated after the others.
func event(id, systemID, storyID string, seq int64, now time.Time) []byte {
	name := "updated"
	if seq == 2 {
		name = "published"
	}
	b := make([]byte, 0, 512)
	b = envelope(b, id, som.TypeStoryEvent, systemID, now)
	b = append(b, `"payload":{"story_id":"`...)
	b = append(b, storyID...)
	b = append(b, `","event":"`...)
	b = append(b, name...)
	b = append(b, `","occurred_at":"`...)
	b = now.UTC().AppendFormat(b, time.RFC3339)
	b = append(b, `","details":{"revision":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"desk":"local","channel":"web","editor":"Ben Editor","note":"Headline and first paragraph revised after the council's statement"}}}`...)
	return b
}

// recordValue is the idempotency record the three-write path stores: the
// same shape and size as the bus's (content hash and state).
func recordValue(body []byte, state string) []byte {
	sum := sha256.Sum256(body)
	b := make([]byte, 0, 96)
	b = append(b, `{"h":"`...)
	b = hex.AppendEncode(b, sum[:])
	b = append(b, `","s":"`...)
	b = append(b, state...)
	b = append(b, `"}`...)
	return b
}
