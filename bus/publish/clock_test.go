package publish_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/rules"
)

// TestLeaseIsMeasuredOnTheStoresClock: without an injected store clock,
// the core asks the store for its time, and a message recorded a moment
// ago has nearly all of its 30 s lease left.
func TestLeaseIsMeasuredOnTheStoresClock(t *testing.T) {
	e := newEnv(t)
	e.core = publish.New(e.ws, e.st.JS, publish.Options{Faults: e.faults.hook, Publisher: e.pub})
	id := uuid.NewString()
	body := snap{id: id, story: "s1", seq: 1}.json()
	e.faults.set(publish.FaultAfterRecord, stopAt(publish.FaultAfterRecord, id))
	if out := e.publish(body); !out.Abandoned {
		t.Fatalf("not stopped: %+v", out)
	}
	e.faults.clear()
	out := e.publish(body)
	want(t, out, http.StatusServiceUnavailable, rules.MessageInFlight)
	if out.RetryAfter <= 20*time.Second || out.RetryAfter > publish.Lease {
		t.Fatalf("Retry-After %s, want nearly the whole lease", out.RetryAfter)
	}
}
