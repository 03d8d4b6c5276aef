package publish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/rules"
)

// The rows of the seed page "Retries and idempotency", against a real
// embedded JetStream.

func TestNewMessageIsPublishedOnce(t *testing.T) {
	e := newEnv(t)
	id := uuid.NewString()
	want(t, e.publish(snap{id: id, story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	if got := e.streamCount(id); got != 1 {
		t.Fatalf("stream holds %d copies, want 1", got)
	}
}

func TestSameContentIsDuplicate(t *testing.T) {
	e := newEnv(t)
	body := snap{id: uuid.NewString(), story: "s1", seq: 1}.json()
	want(t, e.publish(body), http.StatusAccepted, "")
	// At once (the mark may still be in flight) and after it landed.
	out := e.publish(body)
	want(t, out, http.StatusOK, "")
	if !out.Duplicate {
		t.Fatal("200 without duplicate")
	}
	e.core.Wait()
	want(t, e.publish(body), http.StatusOK, "")
	// Key order and whitespace do not make another message.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		t.Fatal(err)
	}
	reordered := []byte("{\n")
	for _, k := range []string{"timestamp", "payload", "system_id", "message_type", "message_id", "som_version"} {
		reordered = append(reordered, fmt.Sprintf("  %q : %s,\n", k, members[k])...)
	}
	reordered = append(reordered[:len(reordered)-2], "\n}"...)
	want(t, e.publish(reordered), http.StatusOK, "")
	if e.pub.calls.Load() != 1 {
		t.Fatalf("%d publish calls, want 1", e.pub.calls.Load())
	}
}

func TestOtherContentUnderSameIDIsReused(t *testing.T) {
	e := newEnv(t)
	id := uuid.NewString()
	want(t, e.publish(snap{id: id, story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	// A rebuilt retry with a new timestamp is a different message.
	want(t, e.publish(snap{id: id, story: "s1", seq: 1, timestamp: "2026-11-29T09:00:01Z"}.json()), http.StatusConflict, rules.MessageIDReused)
	// Reuse is checked first on every path, even when the snapshot is stale.
	want(t, e.publish(snap{id: id, story: "s1", seq: 1, state: "ready"}.json()), http.StatusConflict, rules.MessageIDReused)
}

func TestRecordedButUnpublished(t *testing.T) {
	e := newEnv(t)
	id := uuid.NewString()
	// sequence.start on the first attempt, conformance.embargo_past (a SOM
	// warning) on every attempt.
	body := snap{id: id, story: "s1", seq: 3, embargo: "2026-11-28T09:00:00Z"}.json()
	e.faults.set(publish.FaultAfterRecord, stopAt(publish.FaultAfterRecord, id))
	if out := e.publish(body); !out.Abandoned {
		t.Fatalf("fault point did not stop the publish: %+v", out)
	}
	e.faults.clear()
	e.restart()

	out := e.publish(body)
	want(t, out, http.StatusServiceUnavailable, rules.MessageInFlight)
	if out.RetryAfter <= 0 || out.RetryAfter > publish.Lease {
		t.Fatalf("Retry-After %s", out.RetryAfter)
	}
	e.clock.Advance(29 * time.Second)
	want(t, e.publish(body), http.StatusServiceUnavailable, rules.MessageInFlight)
	e.clock.Advance(time.Second) // 30 s after recording
	out = e.publish(body)
	want(t, out, http.StatusAccepted, "")
	if got := ruleIDs(out); !slices.Equal(got, []string{"conformance.embargo_past"}) {
		t.Fatalf("tolerated %v, want only the SOM warning", got)
	}
	e.core.Wait()
	want(t, e.publish(body), http.StatusOK, "")
	if got := e.streamCount(id); got != 1 {
		t.Fatalf("stream holds %d copies, want 1", got)
	}
}

func TestFirstAttemptWarningsIncludeSequence(t *testing.T) {
	e := newEnv(t)
	out := e.publish(snap{story: "s1", seq: 3}.json())
	want(t, out, http.StatusAccepted, "")
	if got := ruleIDs(out); !slices.Equal(got, []string{rules.SequenceStart}) {
		t.Fatalf("tolerated %v", got)
	}
}

func TestSupersededSnapshotIsNotPublished(t *testing.T) {
	e := newEnv(t)
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	old := uuid.NewString()
	oldBody := snap{id: old, story: "s1", seq: 2}.json()
	e.faults.set(publish.FaultAfterRecord, stopAt(publish.FaultAfterRecord, old))
	if out := e.publish(oldBody); !out.Abandoned {
		t.Fatalf("not stopped: %+v", out)
	}
	e.faults.clear()
	e.restart()
	want(t, e.publish(snap{story: "s1", seq: 3}.json()), http.StatusAccepted, "")
	e.clock.Advance(publish.Lease)
	want(t, e.publish(oldBody), http.StatusConflict, rules.MessageSuperseded)
	e.core.Wait()
	want(t, e.publish(oldBody), http.StatusConflict, rules.MessageSuperseded)
	if got := e.streamCount(old); got != 0 {
		t.Fatalf("superseded snapshot delivered %d times", got)
	}
}

func TestConcurrentRetriesPublishOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recorded bool // a record left unpublished, lease expired
	}{{"new message", false}, {"takeover", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			id := uuid.NewString()
			body := snap{id: id, story: "s1", seq: 1}.json()
			if tc.recorded {
				e.faults.set(publish.FaultAfterRecord, stopAt(publish.FaultAfterRecord, id))
				e.publish(body)
				e.faults.clear()
				e.restart()
				// The first record's lease has run out; a takeover's
				// fresh record starts a new one.
				e.clock.Freeze(time.Now().Add(publish.Lease))
			}
			const n = 12
			outs := make([]publish.Outcome, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() { defer wg.Done(); outs[i] = e.core.Publish(context.Background(), input(t, body)) }()
			}
			wg.Wait()
			accepted := 0
			for _, o := range outs {
				switch {
				case o.Accepted():
					accepted++
				case o.Duplicate:
				case o.Refusal != nil && o.Refusal.Rule == rules.MessageInFlight:
				default:
					t.Fatalf("unexpected answer %+v", o)
				}
			}
			if accepted != 1 {
				t.Fatalf("%d answers 202, want exactly 1", accepted)
			}
			if calls := e.pub.calls.Load(); calls != 1 {
				t.Fatalf("%d publish calls, want 1", calls)
			}
			if got := e.streamCount(id); got != 1 {
				t.Fatalf("stream holds %d copies", got)
			}
		})
	}
}

func TestNewerSnapshotDuringRepublicationIsContention(t *testing.T) {
	e := newEnv(t)
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	old, newer := uuid.NewString(), uuid.NewString()
	oldBody := snap{id: old, story: "s1", seq: 2}.json()
	e.faults.set(publish.FaultAfterRecord, stopAt(publish.FaultAfterRecord, old))
	e.publish(oldBody)
	e.faults.clear()
	e.restart()
	e.clock.Advance(publish.Lease)

	// The newer snapshot reads the head; before it publishes, a retry
	// republishes the old snapshot.
	var republished publish.Outcome
	e.faults.set(publish.FaultBeforePublish, func(id string) error {
		if id == newer {
			republished = e.publish(oldBody)
		}
		return nil
	})
	want(t, e.publish(snap{id: newer, story: "s1", seq: 3}.json()), http.StatusConflict, rules.CommitContention)
	want(t, republished, http.StatusAccepted, "")
	if e.recordExists(newer) {
		t.Fatal("a record was left for the contended snapshot")
	}
	e.faults.clear()
	// Sent again after a moment, it is checked as new and accepted.
	want(t, e.publish(snap{id: newer, story: "s1", seq: 3}.json()), http.StatusAccepted, "")
}

func TestPublishFailureRemovesRecord(t *testing.T) {
	e := newEnv(t)
	id := uuid.NewString()
	body := event(id, "s1")
	e.faults.set(publish.FaultPublish, failAt(id))
	out := e.publish(body)
	want(t, out, http.StatusServiceUnavailable, rules.BusPublishFailed)
	if out.RetryAfter <= 0 {
		t.Fatal("no Retry-After")
	}
	if e.recordExists(id) {
		t.Fatal("record not removed after a definite publish failure")
	}
	e.faults.clear()
	want(t, e.publish(body), http.StatusAccepted, "")
	if got := e.streamCount(id); got != 1 {
		t.Fatalf("stream holds %d copies", got)
	}
}

func TestPublishAndRemovalFailureLeavesLease(t *testing.T) {
	e := newEnv(t)
	id := uuid.NewString()
	body := event(id, "s1")
	e.faults.set(publish.FaultPublish, failAt(id))
	e.faults.set(publish.FaultRemove, failAt(id))
	want(t, e.publish(body), http.StatusServiceUnavailable, rules.BusPublishFailed)
	e.faults.clear()
	want(t, e.publish(body), http.StatusServiceUnavailable, rules.MessageInFlight)
	e.clock.Advance(publish.Lease)
	want(t, e.publish(body), http.StatusAccepted, "")
	if got := e.streamCount(id); got != 1 {
		t.Fatalf("stream holds %d copies", got)
	}
}

func TestLostMarkOfAnEvent(t *testing.T) {
	e := newEnv(t)
	id := uuid.NewString()
	body := event(id, "s1")
	e.faults.set(publish.FaultMark, failAt(id))
	want(t, e.publish(body), http.StatusAccepted, "")
	e.core.Wait()
	e.faults.clear()
	// A new process does not know it was published.
	e.restart()
	want(t, e.publish(body), http.StatusServiceUnavailable, rules.MessageInFlight)
	e.clock.Advance(publish.Lease)
	// The republication is dropped by the topic's duplicate window: the
	// message was published, so the answer is duplicate.
	want(t, e.publish(body), http.StatusOK, "")
	e.core.Wait()
	want(t, e.publish(body), http.StatusOK, "")
	if got := e.streamCount(id); got != 1 {
		t.Fatalf("stream holds %d copies", got)
	}
}

func TestSnapshotRecordsAreProvedByTheStorySubject(t *testing.T) {
	e := newEnv(t)
	first := snap{story: "s1", seq: 1}.json()
	want(t, e.publish(first), http.StatusAccepted, "")
	second := snap{story: "s1", seq: 2}.json()
	want(t, e.publish(second), http.StatusAccepted, "")
	want(t, e.publish(snap{story: "s1", seq: 3}.json()), http.StatusAccepted, "")
	e.restart() // nothing in memory: only the store answers
	// The head and an older snapshot behind it are both found published,
	// at once, without waiting for a lease.
	want(t, e.publish(second), http.StatusOK, "")
	want(t, e.publish(first), http.StatusOK, "")
	if calls := e.pub.calls.Load(); calls != 0 {
		t.Fatalf("%d publish calls for duplicates", calls)
	}
}

func TestStoppedAfterPublish(t *testing.T) {
	e := newEnv(t)
	id := uuid.NewString()
	body := event(id, "s1")
	e.faults.set(publish.FaultAfterPublish, stopAt(publish.FaultAfterPublish, id))
	if out := e.publish(body); !out.Abandoned {
		t.Fatalf("not stopped: %+v", out)
	}
	e.faults.clear()
	e.restart()
	want(t, e.publish(body), http.StatusServiceUnavailable, rules.MessageInFlight)
	e.clock.Advance(publish.Lease)
	want(t, e.publish(body), http.StatusOK, "")
	if got := e.streamCount(id); got != 1 {
		t.Fatalf("within the duplicate window the stream holds %d copies, want 1", got)
	}
}

func TestStoreUnreachable(t *testing.T) {
	e := newEnv(t)
	e.ns.Shutdown()
	e.ns.WaitForShutdown()
	done := make(chan publish.Outcome, 1)
	go func() { done <- e.core.Publish(context.Background(), input(t, snap{story: "s1", seq: 1}.json())) }()
	select {
	case out := <-done:
		want(t, out, http.StatusServiceUnavailable, rules.RegistryUnavailable)
		if out.RetryAfter <= 0 {
			t.Fatal("no Retry-After")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("publish hung with the store down")
	}
}

func TestSnapshotOrder(t *testing.T) {
	e := newEnv(t)
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusConflict, rules.SequenceStale)
	out := e.publish(snap{story: "s1", seq: 4}.json())
	want(t, out, http.StatusAccepted, "")
	if got := ruleIDs(out); !slices.Equal(got, []string{rules.SequenceGap}) {
		t.Fatalf("tolerated %v", got)
	}
	want(t, e.publish(snap{story: "s1", seq: 5, state: "killed"}.json()), http.StatusAccepted, "")
	want(t, e.publish(snap{story: "s1", seq: 6}.json()), http.StatusConflict, rules.SequenceTerminal)
	// Nothing was recorded for refused snapshots.
	id := uuid.NewString()
	want(t, e.publish(snap{id: id, story: "s1", seq: 7}.json()), http.StatusConflict, rules.SequenceTerminal)
	if e.recordExists(id) {
		t.Fatal("a refused snapshot left a record")
	}
}

func TestHeadIsReadFromTheStoreAfterRestart(t *testing.T) {
	e := newEnv(t)
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	want(t, e.publish(snap{story: "s1", seq: 2}.json()), http.StatusAccepted, "")
	e.restart() // empty head cache
	stale := uuid.NewString()
	want(t, e.publish(snap{id: stale, story: "s1", seq: 2}.json()), http.StatusConflict, rules.SequenceStale)
	if e.recordExists(stale) {
		t.Fatal("a refused snapshot left a record")
	}
	e.restart()
	out := e.publish(snap{story: "s1", seq: 3}.json())
	want(t, out, http.StatusAccepted, "")
	if len(out.Tolerated) != 0 {
		t.Fatalf("tolerated %v: the head was not read", ruleIDs(out))
	}
}

func TestForgottenMessageIsCheckedAsNew(t *testing.T) {
	// The idempotency window is 7 days in production (the configuration
	// refuses less); the store's expiry is the same mechanism at any length.
	e := newEnv(t)
	e.connect("shortwindow", time.Second)
	id := uuid.NewString()
	body := snap{id: id, story: "s1", seq: 1}.json()
	want(t, e.publish(body), http.StatusAccepted, "")
	e.core.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for e.recordExists(id) {
		if time.Now().After(deadline) {
			t.Fatal("record never expired")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// "For a snapshot that usually means a refusal as stale."
	want(t, e.publish(body), http.StatusConflict, rules.SequenceStale)
}

func TestRecordsKeptAtLeastTheWindow(t *testing.T) {
	e := newEnv(t)
	e.connect("weekly", 8*24*time.Hour)
	st, err := e.ws.Records.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 8*24*time.Hour {
		t.Fatalf("records TTL %s", st.TTL())
	}
	info, err := e.ws.Stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Duplicates != 5*time.Minute {
		t.Fatalf("topic duplicate window %s, want 5m", info.Config.Duplicates)
	}
}

// TestOwnerWhenThePolicyNamesNone: a policy that names no owner leaves
// the story's owner as it is, and makes the sender the owner of a new
// story, on a first attempt and on the takeover of a record alike.
func TestOwnerWhenThePolicyNamesNone(t *testing.T) {
	e := newEnv(t)
	publishNamingNoOwner := func(body []byte) publish.Outcome {
		in := input(t, body)
		in.Policy = func(publish.Head) publish.Decision { return publish.Decision{} }
		return e.core.Publish(context.Background(), in)
	}
	subject := store.Subject(e.ws.ID, som.FamilyStoryContext, "s1")
	wantOwner := func(owner string) {
		t.Helper()
		last, err := e.ws.Stream.GetLastMsgForSubject(context.Background(), subject)
		if err != nil {
			t.Fatal(err)
		}
		if got := last.Header.Get(publish.HeaderOwner); got != owner {
			t.Fatalf("the story's owner is %q, want %q", got, owner)
		}
	}
	want(t, publishNamingNoOwner(snap{story: "s1", seq: 1, system: "cms"}.json()), http.StatusAccepted, "")
	wantOwner("cms")
	want(t, publishNamingNoOwner(snap{story: "s1", seq: 2, system: "wire"}.json()), http.StatusAccepted, "")
	wantOwner("cms")

	id := uuid.NewString()
	body := snap{id: id, story: "s1", seq: 3, system: "wire"}.json()
	e.faults.set(publish.FaultAfterRecord, stopAt(publish.FaultAfterRecord, id))
	if out := publishNamingNoOwner(body); !out.Abandoned {
		t.Fatalf("not stopped: %+v", out)
	}
	e.faults.clear()
	e.restart()
	e.clock.Advance(publish.Lease)
	want(t, publishNamingNoOwner(body), http.StatusAccepted, "")
	wantOwner("cms")
}
