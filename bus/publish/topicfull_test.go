package publish_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// limit sets the topic's limits, as a bus does when its workspace's
// configuration changes: the workspace is opened again with them.
func (e *env) limit(l store.TopicLimits) {
	e.t.Helper()
	if _, err := e.st.OpenWorkspace(context.Background(), e.ws.ID, 7*24*time.Hour, 0, store.WithTopicLimits(l)); err != nil {
		e.t.Fatal(err)
	}
}

// TestFullTopicRefusesAndKeepsWhatItAccepted: a topic at its limit
// refuses a snapshot and an event with 507 workspace.storage_full and no
// Retry-After, leaves no record claiming either and no story head moved,
// and keeps exactly the messages it accepted; the same messages sent again
// are refused the same way, never answered message.in_flight; once the
// limit is raised they are published (the snapshot following its story's
// last accepted one, without a gap), each once.
func TestFullTopicRefusesAndKeepsWhatItAccepted(t *testing.T) {
	e := newEnv(t)
	e.limit(store.TopicLimits{MaxMsgs: 3})
	var accepted []string
	for _, body := range [][]byte{
		snap{id: uuid.NewString(), story: "s1", seq: 1}.json(),
		event(uuid.NewString(), "s1"),
		snap{id: uuid.NewString(), story: "s1", seq: 2}.json(),
	} {
		out := e.publish(body)
		want(t, out, http.StatusAccepted, "")
		accepted = append(accepted, input(t, body).Msg.MessageID)
	}

	snapID, eventID := uuid.NewString(), uuid.NewString()
	refused := [][]byte{snap{id: snapID, story: "s1", seq: 3}.json(), event(eventID, "s1")}
	for range 2 { // and again: no record was left to answer in flight
		for i, body := range refused {
			out := e.publish(body)
			want(t, out, http.StatusInsufficientStorage, rules.WorkspaceStorageFull)
			if out.RetryAfter != 0 {
				t.Errorf("storage_full with a Retry-After of %v", out.RetryAfter)
			}
			if id := []string{snapID, eventID}[i]; e.recordExists(id) {
				t.Fatalf("a record of refused message %s is left", id)
			}
		}
	}
	var held []string
	e.topic(func(m *jetstream.RawStreamMsg) { held = append(held, m.Header.Get(nats.MsgIdHdr)) })
	if !slices.Equal(held, accepted) {
		t.Fatalf("full topic holds %v, want the accepted %v", held, accepted)
	}

	e.limit(store.TopicLimits{MaxMsgs: 5})
	out := e.publish(refused[0])
	want(t, out, http.StatusAccepted, "")
	if ids := ruleIDs(out); slices.Contains(ids, rules.SequenceGap) {
		t.Fatalf("the refused snapshot moved its story's head: tolerated %v", ids)
	}
	want(t, e.publish(refused[1]), http.StatusAccepted, "")
	want(t, e.publish(refused[0]), http.StatusOK, "")
	e.core.Wait()
	for _, id := range append(accepted, snapID, eventID) {
		if n := e.streamCount(id); n != 1 {
			t.Fatalf("topic holds %d copies of %s, want 1", n, id)
		}
	}
}
