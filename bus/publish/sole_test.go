package publish_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
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

func newSoleEnv(t *testing.T) *env {
	t.Helper()
	soleCores = true
	defer func() { soleCores = false }()
	return newEnv(t)
}

// TestSoleWriterPassesTheCoreTests runs the single-process core tests on a
// sole-writer core: its answers are the same. Left out: the tests of an
// external cluster, TestResendAfterAStaleView, whose two cores write one
// story as two processes would, and
// TestNewerSnapshotDuringRepublicationIsContention,
// whose fault hook publishes a snapshot of the story in the middle of
// another one's publication: in a sole writer that one waits for the other
// to finish, which waits for the hook.
func TestSoleWriterPassesTheCoreTests(t *testing.T) {
	for name, test := range map[string]func(*testing.T){
		"LeaseIsMeasuredOnTheStoresClock":           TestLeaseIsMeasuredOnTheStoresClock,
		"FirstAttemptWarningsIncludeSequence":       TestFirstAttemptWarningsIncludeSequence,
		"PublishAndRemovalFailureLeavesLease":       TestPublishAndRemovalFailureLeavesLease,
		"LostMarkOfAnEvent":                         TestLostMarkOfAnEvent,
		"StoreUnreachable":                          TestStoreUnreachable,
		"ForgottenMessageIsCheckedAsNew":            TestForgottenMessageIsCheckedAsNew,
		"RecordsKeptAtLeastTheWindow":               TestRecordsKeptAtLeastTheWindow,
		"ResendCostsNoStoryWalk":                    TestResendCostsNoStoryWalk,
		"ResendWithARecordOfAnOlderBus":             TestResendWithARecordOfAnOlderBus,
		"RecoverRebuildsLostRecords":                TestRecoverRebuildsLostRecords,
		"RecoverMarksALostMark":                     TestRecoverMarksALostMark,
		"RecoverReadsOnlyTheLossWindow":             TestRecoverReadsOnlyTheLossWindow,
		"RecoverProvesASnapshotWhoseRewriteWasLost": TestRecoverProvesASnapshotWhoseRewriteWasLost,
		"RecoverSkipsWhatTheBusDidNotWrite":         TestRecoverSkipsWhatTheBusDidNotWrite,
		"NewMessageIsPublishedOnce":                 TestNewMessageIsPublishedOnce,
		"SameContentIsDuplicate":                    TestSameContentIsDuplicate,
		"OtherContentUnderSameIDIsReused":           TestOtherContentUnderSameIDIsReused,
		"RecordedButUnpublished":                    TestRecordedButUnpublished,
		"SupersededSnapshotIsNotPublished":          TestSupersededSnapshotIsNotPublished,
		"ConcurrentRetriesPublishOnce":              TestConcurrentRetriesPublishOnce,
		"PublishFailureRemovesRecord":               TestPublishFailureRemovesRecord,
		"SnapshotRecordsAreProvedByTheStorySubject": TestSnapshotRecordsAreProvedByTheStorySubject,
		"StoppedAfterPublish":                       TestStoppedAfterPublish,
		"SnapshotOrder":                             TestSnapshotOrder,
		"HeadIsReadFromTheStoreAfterRestart":        TestHeadIsReadFromTheStoreAfterRestart,
		"OwnerWhenThePolicyNamesNone":               TestOwnerWhenThePolicyNamesNone,
		"FullTopicRefusesAndKeepsWhatItAccepted":    TestFullTopicRefusesAndKeepsWhatItAccepted,
	} {
		t.Run(name, func(t *testing.T) {
			soleCores = true
			defer func() { soleCores = false }()
			test(t)
		})
	}
}

// TestSoleWriterPublishesWithoutTheCompareAndSwap: a sole writer's
// snapshots carry no compare-and-swap, but for the first, over a head read
// from the store; a shared store's carry one each.
func TestSoleWriterPublishesWithoutTheCompareAndSwap(t *testing.T) {
	for _, sole := range []bool{false, true} {
		t.Run("sole="+strconv.FormatBool(sole), func(t *testing.T) {
			e := newEnv(t)
			if sole {
				e = newSoleEnv(t)
			}
			for seq := int64(1); seq <= 3; seq++ {
				want(t, e.publish(snap{story: "s1", seq: seq}.json()), http.StatusAccepted, "")
			}
			want(t, e.publish(snap{story: "s1", seq: 3}.json()), http.StatusConflict, rules.SequenceStale)
			wantSwaps := int64(3)
			if sole {
				wantSwaps = 1
			}
			if got := e.pub.swaps.Load(); got != wantSwaps {
				t.Fatalf("%d publishes carried the compare-and-swap, want %d", got, wantSwaps)
			}
		})
	}
}

// storyOrder reads the sequence numbers of a story's snapshots, in the
// topic's order.
func (e *env) storyOrder(story string) []int64 {
	e.t.Helper()
	subject := store.Subject(e.ws.ID, som.FamilyStoryContext, story)
	var seqs []int64
	e.topic(func(m *jetstream.RawStreamMsg) {
		if m.Subject != subject {
			return
		}
		n, err := strconv.ParseInt(m.Header.Get(publish.HeaderSequence), 10, 64)
		if err != nil {
			e.t.Fatal(err)
		}
		seqs = append(seqs, n)
	})
	return seqs
}

// TestSoleWriterKeepsEveryStoryInOrder: producers racing on the same
// stories, with no compare-and-swap to stop them, still leave every story
// in increasing order, and every 202 on the topic once.
func TestSoleWriterKeepsEveryStoryInOrder(t *testing.T) {
	e := newSoleEnv(t)
	const stories, producers, maxSeq = 3, 12, 30
	var mu sync.Mutex
	accepted := map[string]int64{} // message_id → sequence number
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 7))
			for range 25 {
				story := fmt.Sprintf("s%d", rng.IntN(stories))
				seq := 1 + rng.Int64N(maxSeq)
				id := uuid.NewString()
				out := e.core.Publish(context.Background(), input(t, snap{id: id, story: story, seq: seq}.json()))
				switch {
				case out.Accepted():
					mu.Lock()
					accepted[id] = seq
					mu.Unlock()
				case out.Refusal != nil && (out.Refusal.Rule == rules.SequenceStale):
				default:
					t.Errorf("unexpected answer %+v", out)
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for s := range stories {
		order := e.storyOrder(fmt.Sprintf("s%d", s))
		for i := 1; i < len(order); i++ {
			if order[i] <= order[i-1] {
				t.Fatalf("story s%d out of order on the topic: %v", s, order)
			}
		}
		total += len(order)
	}
	if total != len(accepted) {
		t.Fatalf("the topic holds %d snapshots, %d were answered 202", total, len(accepted))
	}
	// Each story's first snapshot, over a head read from the store.
	if swaps := e.pub.swaps.Load(); swaps != stories {
		t.Fatalf("%d publishes carried the compare-and-swap, want %d", swaps, stories)
	}
}

// TestSoleWriterForgetsTheHeadAfterAnUnansweredPublish: a snapshot stored
// whose acknowledgement was lost leaves the core's head behind the store;
// the core forgets it, reads the story again, and confirms its next
// publish with the compare-and-swap before it goes without again.
func TestSoleWriterForgetsTheHeadAfterAnUnansweredPublish(t *testing.T) {
	e := newSoleEnv(t)
	want(t, e.publish(snap{story: "s1", seq: 1}.json()), http.StatusAccepted, "")
	lost := uuid.NewString()
	e.pub.around = func(ctx context.Context, m *nats.Msg, publish func() (*jetstream.PubAck, error)) (*jetstream.PubAck, error) {
		ack, err := publish()
		if err == nil && m.Header.Get(nats.MsgIdHdr) == lost {
			return nil, context.DeadlineExceeded // stored, the answer lost
		}
		return ack, err
	}
	swaps := e.pub.swaps.Load()
	want(t, e.publish(snap{id: lost, story: "s1", seq: 2}.json()), http.StatusServiceUnavailable, rules.BusPublishFailed)
	if got := e.pub.swaps.Load() - swaps; got != 0 {
		t.Fatalf("the publish over the core's own head carried %d compare-and-swaps", got)
	}

	// Another snapshot numbered 2: the store holds the lost one's 2.
	want(t, e.publish(snap{story: "s1", seq: 2}.json()), http.StatusConflict, rules.SequenceStale)
	swaps = e.pub.swaps.Load()
	want(t, e.publish(snap{story: "s1", seq: 3}.json()), http.StatusAccepted, "")
	if got := e.pub.swaps.Load() - swaps; got != 1 {
		t.Fatalf("the publish over a head read again carried %d compare-and-swaps, want 1", got)
	}
	swaps = e.pub.swaps.Load()
	want(t, e.publish(snap{story: "s1", seq: 4}.json()), http.StatusAccepted, "")
	if got := e.pub.swaps.Load() - swaps; got != 0 {
		t.Fatalf("%d compare-and-swaps after the story was settled again, want 0", got)
	}
	if got := e.storyOrder("s1"); fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("story on the topic: %v, want [1 2 3 4]", got)
	}
}

// TestAHeadTheTopicMayHaveDroppedIsReadAgain: with a topic retention, a
// cached head whose message is older than half of it, on the core's clock,
// is read again: a story whose messages aged out counts as new (order and
// owner start over), and a sole writer confirms its publish with the
// compare-and-swap. Just before half the retention the cached head is
// still used: the story's messages gone, it still refuses as its head.
func TestAHeadTheTopicMayHaveDroppedIsReadAgain(t *testing.T) {
	const retention = 48 * time.Hour
	for _, tc := range []struct {
		sole, later bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		// later: the workspace had no retention when its core was made,
		// and a new document gave it one (SetTopicRetention).
		t.Run(fmt.Sprintf("sole=%t,later=%t", tc.sole, tc.later), func(t *testing.T) {
			e := newEnv(t)
			clock := &fakeClock{}
			o := publish.Options{StoreClock: e.clock, Clock: clock, Publisher: e.pub, SoleWriter: tc.sole, TopicRetention: retention}
			if tc.later {
				o.TopicRetention = 0
			}
			e.core = publish.New(e.ws, e.st.JS, o)
			want(t, e.publish(snap{story: "s1", seq: 5, system: "cms"}.json()), http.StatusAccepted, "")
			want(t, e.publish(snap{story: "s1", seq: 6, system: "cms"}.json()), http.StatusAccepted, "")
			if tc.later {
				e.core.SetTopicRetention(retention)
			}
			// The story's messages leave the topic, as retention removes them.
			subject := store.Subject(e.ws.ID, som.FamilyStoryContext, "s1")
			if err := e.ws.Stream.Purge(context.Background(), jetstream.WithPurgeSubject(subject)); err != nil {
				t.Fatal(err)
			}
			clock.Advance(retention/2 - time.Minute)
			want(t, e.publish(snap{story: "s1", seq: 1, system: "wire"}.json()), http.StatusConflict, rules.SequenceStale)
			clock.Advance(time.Minute) // the cached head is now old enough to have gone
			swaps := e.pub.swaps.Load()
			out := e.publish(snap{story: "s1", seq: 1, system: "wire"}.json())
			want(t, out, http.StatusAccepted, "")
			if len(out.Tolerated) != 0 {
				t.Fatalf("tolerated %v: the story should count as new", ruleIDs(out))
			}
			last, err := e.ws.Stream.GetLastMsgForSubject(context.Background(), subject)
			if err != nil {
				t.Fatal(err)
			}
			if owner := last.Header.Get(publish.HeaderOwner); owner != "wire" {
				t.Fatalf("the story's owner is %q, want wire: the old owner outlived the story", owner)
			}
			if got := e.pub.swaps.Load() - swaps; got != 1 {
				t.Fatalf("%d compare-and-swaps over the head read again, want 1", got)
			}
		})
	}
}

// TestSoleWriterHoldsAStoryUntilTheStoreAnswers: while a story's publish
// waits for the store, its next snapshot waits too (and gives up,
// unpublished, when its request could not wait and publish in time); other
// stories go on.
func TestSoleWriterHoldsAStoryUntilTheStoreAnswers(t *testing.T) {
	e := newSoleEnv(t)
	slow := uuid.NewString()
	entered, release := make(chan struct{}), make(chan struct{})
	e.pub.around = func(ctx context.Context, m *nats.Msg, publish func() (*jetstream.PubAck, error)) (*jetstream.PubAck, error) {
		if m.Header.Get(nats.MsgIdHdr) == slow {
			close(entered)
			<-release
		}
		return publish()
	}
	done := make(chan publish.Outcome, 1)
	go func() {
		done <- e.core.Publish(context.Background(), input(t, snap{id: slow, story: "s1", seq: 1}.json()))
	}()
	<-entered

	// A request with less time left than the store operations' deadline
	// (10 s here) gives up at once rather than wait and then run short.
	waiting := uuid.NewString()
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
	started := time.Now()
	out := e.core.Publish(ctx, input(t, snap{id: waiting, story: "s1", seq: 2}.json()))
	cancel()
	want(t, out, http.StatusServiceUnavailable, rules.BusPublishFailed)
	if waited := time.Since(started); waited > 5*time.Second {
		t.Fatalf("waited %v for the story with too little time left to publish", waited)
	}
	if e.recordExists(waiting) {
		t.Fatal("the snapshot that gave up waiting left a record")
	}
	// Each story has its own lock: the three others do not wait for s1.
	others := make(chan publish.Outcome, 3)
	for _, story := range []string{"s2", "s3", "s4"} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			others <- e.core.Publish(ctx, input(t, snap{story: story, seq: 1}.json()))
		}()
	}
	accepted := 0
	for range 3 {
		if out := <-others; out.Accepted() {
			accepted++
		}
	}
	if accepted != 3 {
		t.Fatalf("%d of 3 other stories published while s1 waited, want all", accepted)
	}

	close(release)
	want(t, <-done, http.StatusAccepted, "")
	want(t, e.publish(snap{id: waiting, story: "s1", seq: 2}.json()), http.StatusAccepted, "")
	if got := e.storyOrder("s1"); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("story on the topic: %v, want [1 2]", got)
	}
}
