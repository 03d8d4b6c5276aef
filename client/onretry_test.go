package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/storybus/storybus/client"
)

// TestOnRetryReportsEveryAttemptSentAgain: the hook sees each failed
// attempt the client sends again, with its status, rule and Retry-After,
// or the missing answer, and not the final refusal, which is returned.
func TestOnRetryReportsEveryAttemptSentAgain(t *testing.T) {
	st := newStub(t, func(n int, id string, w http.ResponseWriter, _ *http.Request) {
		switch n {
		case 0:
			refusal(w, http.StatusServiceUnavailable, "registry.unavailable", "the record store is unreachable", "")
		case 1:
			w.Header().Set("Retry-After", "2")
			refusal(w, http.StatusTooManyRequests, "rate.limited", "slow down", "")
		case 2:
			// The connection drops before an answer.
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
		case 3:
			accepted(w, id)
		default:
			refusal(w, http.StatusConflict, client.RuleSequenceStale, "stale", "/payload/sequence_number")
		}
	})
	var mu sync.Mutex
	var seen []*client.Error
	s := newSetup(t, st.URL, nil, func(o *client.Options) {
		o.OnRetry = func(e *client.Error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, e)
		}
	})
	m := snapshot(t, "", "s1", 1, "draft")
	res, err := s.client.Publish(context.Background(), m)
	if err != nil || res.Attempts != 4 {
		t.Fatalf("publish: %+v %v", res, err)
	}
	if len(seen) != 3 {
		t.Fatalf("OnRetry saw %d attempts, want 3: %v", len(seen), seen)
	}
	if e := seen[0]; e.Status != http.StatusServiceUnavailable || e.Rule != "registry.unavailable" || e.RetryAfter == 0 || e.MessageID != m.ID() || e.Attempts != 1 {
		t.Fatalf("first: %+v", e)
	}
	if e := seen[1]; e.Status != http.StatusTooManyRequests || e.Rule != "rate.limited" || e.RetryAfter.Seconds() != 2 {
		t.Fatalf("second: %+v", e)
	}
	if e := seen[2]; e.Status != 0 || !errors.Is(e, client.ErrNoAnswer) {
		t.Fatalf("third: %+v", e)
	}
	// A final refusal is the caller's, not a retry.
	if _, err := s.client.Publish(context.Background(), snapshot(t, "", "s2", 1, "draft")); client.StatusOf(err) != http.StatusConflict {
		t.Fatalf("the refusal: %v", err)
	}
	if len(seen) != 3 {
		t.Fatalf("OnRetry saw a final refusal: %v", seen[3:])
	}
}
