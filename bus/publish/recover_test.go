package publish_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// loseRecord removes a message's record as a crash of the process would
// have lost it: published, fsynced in the topic, its record not flushed.
func (e *env) loseRecord(messageID string) {
	e.t.Helper()
	if err := e.ws.Records.Purge(context.Background(), store.EncodeToken(messageID)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) recover() publish.Recovery {
	e.t.Helper()
	rec, err := e.core.Recover(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

// TestRecoverRebuildsLostRecords: the records a crash lost are rebuilt from
// the topic, so a retry of a published snapshot is 200 duplicate even once
// its story has moved on, which without its record it could not be.
func TestRecoverRebuildsLostRecords(t *testing.T) {
	e := newEnv(t)
	if e.ws.RecordsLossWindow <= 0 {
		t.Fatalf("the embedded store's records bucket reports no loss window")
	}
	first, ev := uuid.NewString(), uuid.NewString()
	firstBody, evBody := snap{id: first, story: "s1", seq: 1}.json(), event(ev, "s1")
	want(t, e.publish(firstBody), http.StatusAccepted, "")
	want(t, e.publish(evBody), http.StatusAccepted, "")
	e.core.Wait()
	e.loseRecord(first)
	e.loseRecord(ev)
	e.restart()
	want(t, e.publish(snap{story: "s1", seq: 2}.json()), http.StatusAccepted, "")

	// Without its record, the retry of the published snapshot looks stale.
	e.restart()
	want(t, e.publish(firstBody), http.StatusConflict, rules.SequenceStale)

	rec := e.recover()
	if rec.Rebuilt != 2 || rec.Messages != 3 {
		t.Fatalf("recovery %+v; want 3 messages read, 2 records rebuilt", rec)
	}
	want(t, e.publish(firstBody), http.StatusOK, "")
	want(t, e.publish(evBody), http.StatusOK, "")
	// The rebuilt record holds the content's hash: other content is a reuse.
	want(t, e.publish(snap{id: first, story: "s1", seq: 1, timestamp: "2026-11-29T09:00:01Z"}.json()), http.StatusConflict, rules.MessageIDReused)
	for _, id := range []string{first, ev} {
		if n := e.streamCount(id); n != 1 {
			t.Errorf("the topic holds %d copies of %s; want 1", n, id)
		}
	}
	if again := e.recover(); again.Rebuilt != 0 || again.Marked != 0 {
		t.Errorf("a second recovery changed records: %+v", again)
	}
}

// TestRecoverMarksALostMark: an event published whose mark was lost is
// marked, so its retry is 200 duplicate at once instead of waiting out the
// lease in 503 message.in_flight.
func TestRecoverMarksALostMark(t *testing.T) {
	e := newEnv(t)
	id := uuid.NewString()
	e.faults.set(publish.FaultMark, failAt(id))
	want(t, e.publish(event(id, "s1")), http.StatusAccepted, "")
	e.core.Wait()
	e.faults.clear()
	e.restart()
	want(t, e.publish(event(id, "s1")), http.StatusServiceUnavailable, rules.MessageInFlight)

	if rec := e.recover(); rec.Marked != 1 || rec.Rebuilt != 0 {
		t.Fatalf("recovery %+v; want 1 record marked", rec)
	}
	entry, err := e.ws.Records.Get(context.Background(), store.EncodeToken(id))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		State string `json:"s"`
	}
	if err := json.Unmarshal(entry.Value(), &r); err != nil || r.State != "published" {
		t.Fatalf("record %s (%v); want state published", entry.Value(), err)
	}
	want(t, e.publish(event(id, "s1")), http.StatusOK, "")
	if n := e.streamCount(id); n != 1 {
		t.Fatalf("the topic holds %d copies; want 1", n)
	}
}

// TestNoRecoveryWhenRecordsAreDurable: a records bucket that is durable
// when a write is acknowledged (an external cluster's) needs no recovery,
// and none reads the topic.
func TestNoRecoveryWhenRecordsAreDurable(t *testing.T) {
	e := newEnv(t)
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	if rec := e.recover(); rec.Messages != 1 {
		t.Fatalf("recovery read %d messages; want 1", rec.Messages)
	}
	ws := *e.ws
	ws.RecordsLossWindow = 0
	core := publish.New(&ws, e.st.JS, publish.Options{})
	if rec, err := core.Recover(context.Background()); err != nil || rec.Messages != 0 {
		t.Fatalf("recovery without a loss window: %+v, %v; want nothing read", rec, err)
	}
}

// TestRecoverReadsOnlyTheLossWindow: a start reads the topic's messages of
// the loss window before its last message, not the whole topic.
func TestRecoverReadsOnlyTheLossWindow(t *testing.T) {
	e := newEnv(t)
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	// The store stamps messages with its own clock: the next one is
	// stamped well over the window plus its second of margin later.
	time.Sleep(3500 * time.Millisecond)
	want(t, e.publish(snap{story: "s1", seq: 2}.json()), http.StatusAccepted, "")
	ws := *e.ws
	ws.RecordsLossWindow = time.Second
	rec, err := publish.New(&ws, e.st.JS, publish.Options{}).Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Messages != 1 {
		t.Fatalf("recovery read %d messages; want only the last one", rec.Messages)
	}
}

// TestRecoverProvesASnapshotWhoseRewriteWasLost: a takeover rewrites the
// snapshot's record to name the head it republishes after; if a crash loses
// that rewrite after the publication, the record left names an older head
// and no longer proves it. The recovery finds the snapshot in the topic and
// marks the record, so the retry, once the story moved on, is 200
// duplicate and not 409 message.superseded.
func TestRecoverProvesASnapshotWhoseRewriteWasLost(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	want(t, e.publish(snap{story: "s", seq: 1}.json()), http.StatusAccepted, "")
	a := uuid.NewString()
	aBody := snap{id: a, story: "s", seq: 3}.json()
	e.faults.set(publish.FaultAfterRecord, stopAt(publish.FaultAfterRecord, a))
	e.publish(aBody) // recorded against head seq 1, never published
	e.faults.clear()
	e.restart()
	want(t, e.publish(snap{story: "s", seq: 2}.json()), http.StatusAccepted, "")
	old, err := e.ws.Records.Get(ctx, store.EncodeToken(a))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(publish.Lease + 1e9)
	want(t, e.publish(aBody), http.StatusAccepted, "") // takeover: rewrite names seq 2's head, publish
	e.core.Wait()
	// The crash loses the takeover's rewrite: the old revision is back.
	if err := e.ws.Records.Purge(ctx, store.EncodeToken(a)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ws.Records.Put(ctx, store.EncodeToken(a), old.Value()); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if rec := e.recover(); rec.Marked != 1 || rec.Rebuilt != 0 {
		t.Fatalf("recovery %+v; want the snapshot's record marked", rec)
	}
	want(t, e.publish(snap{story: "s", seq: 4}.json()), http.StatusAccepted, "")
	e.clock.Advance(publish.Lease + 1e9)
	want(t, e.publish(aBody), http.StatusOK, "")
	if n := e.streamCount(a); n != 1 {
		t.Fatalf("the topic holds %d copies; want 1", n)
	}
}

// TestRecoverSkipsWhatTheBusDidNotWrite: a message something else wrote to
// the topic (the embedded store's NATS port can be opened to clients) is
// counted and skipped; it never stops a start.
func TestRecoverSkipsWhatTheBusDidNotWrite(t *testing.T) {
	e := newEnv(t)
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	ctx := context.Background()
	subject := store.Subject(e.ws.ID, "story-event", "x")
	if _, err := e.st.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte("hello"), Header: nats.Header{nats.MsgIdHdr: []string{uuid.NewString()}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.JS.Publish(ctx, subject, []byte(`{"no":"id"}`)); err != nil {
		t.Fatal(err)
	}
	rec := e.recover()
	if rec.Skipped != 2 || rec.Messages != 3 {
		t.Fatalf("recovery %+v; want 3 messages read, 2 skipped", rec)
	}
}

// TestRecoverAsksTheTopicBeforeWhatItRead: a snapshot's record that names
// a head older than the topic the recovery read is proved or disproved by
// asking the topic, as when nothing is read ahead; one that names a head
// within it is decided from what was read. Either way the retry is 200
// duplicate.
func TestRecoverAsksTheTopicBeforeWhatItRead(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "") // stream sequence 1
	want(t, e.publish(snap{story: "s1", seq: 2}.json()), http.StatusAccepted, "") // 2
	want(t, e.publish(snap{story: "s2", seq: 1}.json()), http.StatusAccepted, "") // 3
	want(t, e.publish(snap{story: "s3", seq: 1}.json()), http.StatusAccepted, "") // 4
	// Stamped well past the one-second window and its second of margin.
	time.Sleep(3500 * time.Millisecond)
	x, y := uuid.NewString(), uuid.NewString()
	xBody, yBody := snap{id: x, story: "s1", seq: 3}.json(), snap{id: y, story: "s2", seq: 2}.json()
	want(t, e.publish(xBody), http.StatusAccepted, "") // 5, after head 2
	want(t, e.publish(yBody), http.StatusAccepted, "") // 6, after head 3
	want(t, e.publish(snap{story: "s1", seq: 4}.json()), http.StatusAccepted, "")
	want(t, e.publish(snap{story: "s2", seq: 3}.json()), http.StatusAccepted, "")
	e.core.Wait()
	// A crash lost x's last rewrite: its record names head 1, and the
	// snapshot of sequence 2 came between.
	entry, err := e.ws.Records.Get(ctx, store.EncodeToken(x))
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(entry.Value(), &r); err != nil {
		t.Fatal(err)
	}
	if r["e"] != float64(2) {
		t.Fatalf("x's record %s; want it to name head 2", entry.Value())
	}
	r["e"] = 1
	old, _ := json.Marshal(r)
	if _, err := e.ws.Records.Put(ctx, store.EncodeToken(x), old); err != nil {
		t.Fatal(err)
	}
	e.restart()
	ws := *e.ws
	ws.RecordsLossWindow = time.Second
	rec, err := publish.New(&ws, e.st.JS, publish.Options{}).Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Messages != 4 || rec.Marked != 1 || rec.Rebuilt != 0 {
		t.Fatalf("recovery %+v; want 4 messages read, x's record marked", rec)
	}
	e.clock.Advance(publish.Lease + 1e9)
	want(t, e.publish(xBody), http.StatusOK, "")
	want(t, e.publish(yBody), http.StatusOK, "")
	for _, id := range []string{x, y} {
		if n := e.streamCount(id); n != 1 {
			t.Errorf("the topic holds %d copies of %s; want 1", n, id)
		}
	}
}

// TestRecoverPastTheRecordsItHolds: past the records a recovery holds in
// memory, the messages left have their records read on their own, and a
// record lost among them is rebuilt all the same.
func TestRecoverPastTheRecordsItHolds(t *testing.T) {
	defer publish.SetRecordsAhead(1)()
	e := newEnv(t)
	var bodies [][]byte
	var last string
	for i := range 4 {
		last = uuid.NewString()
		body := snap{id: last, story: "s", seq: int64(i + 1)}.json()
		if i == 3 {
			body = event(last, "s")
		}
		want(t, e.publish(body), http.StatusAccepted, "")
		bodies = append(bodies, body)
	}
	e.core.Wait()
	e.loseRecord(last)
	e.restart()
	rec := e.recover()
	if rec.Records != 1 || rec.Messages != 4 || rec.Rebuilt != 1 || rec.Alone < 3 {
		t.Fatalf("recovery %+v; want 1 record held, 4 messages read, 3 or more read alone, 1 rebuilt", rec)
	}
	for _, b := range bodies {
		want(t, e.publish(b), http.StatusOK, "")
	}
}
