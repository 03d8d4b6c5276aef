package publish_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// longStory is the number of snapshots a story holds before the resent one.
const longStory = 10_000

// TestResendCostsNoStoryWalk: resending a snapshot that is no longer its
// story's latest costs a handful of store round trips, not one per message
// of the story, whether it was published (200 duplicate) or left recorded
// and never published (409 message.superseded).
func TestResendCostsNoStoryWalk(t *testing.T) {
	for _, tc := range []struct {
		name      string
		published bool
	}{{"published", true}, {"never published", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.fillStory("s1", longStory)
			id := uuid.NewString()
			body := snap{id: id, story: "s1", seq: longStory + 1}.json()
			if !tc.published {
				e.faults.set(publish.FaultAfterRecord, stopAt(publish.FaultAfterRecord, id))
				if out := e.publish(body); !out.Abandoned {
					t.Fatalf("not stopped: %+v", out)
				}
				e.faults.clear()
			} else {
				want(t, e.publish(body), http.StatusAccepted, "")
			}
			e.restart()
			want(t, e.publish(snap{story: "s1", seq: longStory + 2}.json()), http.StatusAccepted, "")
			e.restart() // nothing in memory: only the store answers
			e.clock.Advance(publish.Lease)

			before := e.st.Conn.Stats()
			out := e.publish(body)
			e.core.Wait() // a background mark counts too
			after := e.st.Conn.Stats()
			if tc.published {
				want(t, out, http.StatusOK, "")
			} else {
				want(t, out, http.StatusConflict, rules.MessageSuperseded)
			}
			trips := after.OutMsgs - before.OutMsgs
			t.Logf("%d store round trips", trips)
			// Each store operation is one request and one reply.
			if trips > 8 {
				t.Fatalf("the resend cost %d store round trips in a story of %d snapshots", trips, longStory+2)
			}
			if got, want := e.streamCount(id), map[bool]int{true: 1, false: 0}[tc.published]; got != want {
				t.Fatalf("stream holds %d copies, want %d", got, want)
			}
		})
	}
}

// fillStory writes n snapshots of a story straight to the topic, as the bus
// publishes them (with their head headers), with asynchronous publishes.
func (e *env) fillStory(story string, n int) {
	e.t.Helper()
	subject := store.Subject(e.ws.ID, som.FamilyStoryContext, story)
	for seq := 1; seq <= n; seq++ {
		m := &nats.Msg{Subject: subject, Data: snap{story: story, seq: int64(seq)}.json(), Header: nats.Header{}}
		m.Header.Set(nats.MsgIdHdr, uuid.NewString())
		m.Header.Set(publish.HeaderMessageType, "story.context")
		m.Header.Set(publish.HeaderSystemID, "cms")
		m.Header.Set(publish.HeaderSequence, strconv.Itoa(seq))
		m.Header.Set(publish.HeaderState, "draft")
		m.Header.Set(publish.HeaderOwner, "cms")
		if _, err := e.st.JS.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(uint64(seq-1))); err != nil {
			e.t.Fatal(err)
		}
		if seq%1000 == 0 || seq == n {
			select {
			case <-e.st.JS.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				e.t.Fatal("asynchronous publishes not acknowledged in 30s")
			}
		}
	}
	info, err := e.ws.Stream.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	if info.State.Msgs != uint64(n) {
		e.t.Fatalf("the topic holds %d messages, want %d", info.State.Msgs, n)
	}
}

// TestResendAfterAStaleView: a process whose cached head was behind
// publishes a snapshot after re-reading the head; its record then names
// the head the snapshot really follows, so a resend after a newer snapshot
// still finds it published.
func TestResendAfterAStaleView(t *testing.T) {
	e := newEnv(t)
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	behind := e.core // its cache holds sequence 1 as the head
	e.restart()
	want(t, e.publish(snap{story: "s1", seq: 2}.json()), http.StatusAccepted, "")

	id := uuid.NewString()
	body := snap{id: id, story: "s1", seq: 3}.json()
	out := behind.Publish(context.Background(), input(t, body))
	want(t, out, http.StatusAccepted, "")
	if len(out.Tolerated) != 0 {
		t.Fatalf("tolerated %v: the fresh head was not used", ruleIDs(out))
	}
	want(t, e.publish(snap{story: "s1", seq: 4}.json()), http.StatusAccepted, "")
	e.restart()
	want(t, e.publish(body), http.StatusOK, "")
	if got := e.streamCount(id); got != 1 {
		t.Fatalf("stream holds %d copies, want 1", got)
	}
}

// TestResendWithARecordOfAnOlderBus: a record without the head its
// snapshot follows, as a bus before this one wrote them (during a rolling
// upgrade), is still proved published, by reading the story subject.
func TestResendWithARecordOfAnOlderBus(t *testing.T) {
	e := newEnv(t)
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	id := uuid.NewString()
	body := snap{id: id, story: "s1", seq: 2}.json()
	want(t, e.publish(body), http.StatusAccepted, "")
	want(t, e.publish(snap{story: "s1", seq: 3}.json()), http.StatusAccepted, "")
	h := input(t, body).Hash
	old := fmt.Sprintf(`{"h":%q,"s":"recorded"}`, hex.EncodeToString(h[:]))
	if _, err := e.ws.Records.Put(context.Background(), store.EncodeToken(id), []byte(old)); err != nil {
		t.Fatal(err)
	}
	e.restart()
	want(t, e.publish(body), http.StatusOK, "")
	if got := e.streamCount(id); got != 1 {
		t.Fatalf("stream holds %d copies, want 1", got)
	}
}
