package bus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/rules"
)

// storeClock is the embedded store's time, which is this process's wall
// clock, moved on by Advance as the bus's clock is.
type storeClock struct{ offset atomic.Int64 }

func (c *storeClock) StoreNow(context.Context) (time.Time, error) {
	return time.Now().Add(time.Duration(c.offset.Load())), nil
}

// TestBusClockSkewDecidesNothing runs two bus processes whose clock is 10 s
// behind, or ahead of, the store's: contention is still told from a stale
// view by the store's timestamps, and a recorded message's lease is still
// 30 s of the store's time.
func TestBusClockSkewDecidesNothing(t *testing.T) {
	for _, skew := range []time.Duration{-10 * time.Second, 10 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			ns := startNATS(t)
			busClock, store := &fakeClock{}, &storeClock{}
			busClock.Advance(skew)
			advance := func(d time.Duration) {
				busClock.Advance(d)
				store.offset.Add(int64(d))
			}
			var hook atomic.Pointer[publish.Faults]
			o := bus.Options{Clock: busClock, StoreClock: store, Faults: func(ctx context.Context, p publish.FaultPoint, id string) error {
				if f := hook.Load(); f != nil {
					return (*f)(ctx, p, id)
				}
				return nil
			}}
			a, b := newReplicaWith(t, ns, o, workspaceConfig("newsroom")), newReplicaWith(t, ns, o, workspaceConfig("newsroom"))
			tokA, tokB := a.token(t, "newsroom", "cms", cmsSecret), b.token(t, "newsroom", "cms", cmsSecret)
			setHook := func(f publish.Faults) { hook.Store(&f) }
			stopAt := func(point publish.FaultPoint, stopped string) publish.Faults {
				return func(_ context.Context, p publish.FaultPoint, id string) error {
					if p == point && id == stopped {
						return publish.ErrStop
					}
					return nil
				}
			}
			postStopped := func(h *harness, tok string, body []byte) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/messages", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				if res, err := http.DefaultClient.Do(req); err == nil {
					res.Body.Close()
					t.Fatalf("a stopped publish answered %d", res.StatusCode)
				}
			}

			// A's view of s1 is behind: B accepted a newer snapshot a
			// moment ago, before A's next one. That is a stale view, not
			// a contention.
			expect(t, a.post(t, "newsroom", tokA, snapshot("", "s1", 1, "cms")), http.StatusAccepted, "")
			expect(t, b.post(t, "newsroom", tokB, snapshot("", "s1", 2, "cms")), http.StatusAccepted, "")
			expect(t, a.post(t, "newsroom", tokA, snapshot("", "s1", 3, "cms")), http.StatusAccepted, "")

			// A recorded message's lease is 30 s of the store's time.
			held := snapshot("", "s3", 1, "cms")
			setHook(stopAt(publish.FaultAfterRecord, messageID(t, held)))
			postStopped(a, tokA, held)
			hook.Store(nil)
			r := b.post(t, "newsroom", tokB, held)
			expect(t, r, http.StatusServiceUnavailable, rules.MessageInFlight)
			expectRetryAfter(t, r, 30)
			advance(29 * time.Second)
			r = b.post(t, "newsroom", tokB, held)
			expect(t, r, http.StatusServiceUnavailable, rules.MessageInFlight)
			expectRetryAfter(t, r, 1)
			advance(time.Second)
			expect(t, b.post(t, "newsroom", tokB, held), http.StatusAccepted, "")

			// A real contention is still one: a snapshot recorded on A
			// while B republishes an older snapshot of its story.
			expect(t, a.post(t, "newsroom", tokA, snapshot("", "s2", 1, "cms")), http.StatusAccepted, "")
			old := snapshot("", "s2", 2, "cms")
			setHook(stopAt(publish.FaultAfterRecord, messageID(t, old)))
			postStopped(a, tokA, old)
			advance(publish.Lease)
			newer := uuid.NewString()
			var republished answer
			setHook(func(_ context.Context, p publish.FaultPoint, id string) error {
				if p == publish.FaultBeforePublish && id == newer {
					republished = b.post(t, "newsroom", tokB, old)
				}
				return nil
			})
			expect(t, a.post(t, "newsroom", tokA, snapshot(newer, "s2", 3, "cms")), http.StatusConflict, rules.CommitContention)
			expect(t, republished, http.StatusAccepted, "")
		})
	}
}

// messageID returns a SOM message's message_id.
func messageID(t *testing.T, body []byte) string {
	t.Helper()
	var m struct {
		MessageID string `json:"message_id"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.MessageID == "" {
		t.Fatalf("no message_id in %s", body)
	}
	return m.MessageID
}
