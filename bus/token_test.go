package bus_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/bus/rules"
)

// tokenAnswer asks a replica for a token without failing the test.
func (h *harness) tokenAnswer(t *testing.T, client, secret string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/tenants/newsroom/tokens", nil)
	req.SetBasicAuth(client, secret)
	return h.do(t, req)
}

// TestTokenAttemptsLockOutAcrossReplicas fails a client id's secret
// through two bus processes on one JetStream: the failures add up, and
// once the limit is reached the right secret is refused too, on both,
// until the window has passed.
func TestTokenAttemptsLockOutAcrossReplicas(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	o := bus.Options{Clock: clock, TokenAttempts: &bus.TokenAttempts{PerClient: 4, Window: 10 * time.Minute}}
	replicas := []*harness{newReplicaWith(t, ns, o, workspaceConfig("newsroom")), newReplicaWith(t, ns, o, workspaceConfig("newsroom"))}

	for i := range 4 {
		h := replicas[i%2]
		expect(t, h.tokenAnswer(t, "cms", "wrong-secret-0123456789abcdef0123456789"), http.StatusUnauthorized, rules.AuthCredentialsInvalid)
		clock.Advance(time.Minute)
	}
	// The fourth failure, at 09:03, locked cms out until 09:13.
	for _, h := range replicas {
		a := h.tokenAnswer(t, "cms", cmsSecret)
		expect(t, a, http.StatusTooManyRequests, rules.AuthAttemptsExceeded)
		expectRetryAfter(t, a, 600-60)
		// Another client id is not affected.
		h.token(t, "newsroom", "wire", wireSecret)
	}
	// Failures during the lockout do not prolong it.
	expect(t, replicas[0].tokenAnswer(t, "cms", "wrong"), http.StatusTooManyRequests, rules.AuthAttemptsExceeded)
	clock.Advance(9*time.Minute - time.Second)
	a := replicas[1].tokenAnswer(t, "cms", cmsSecret)
	expect(t, a, http.StatusTooManyRequests, rules.AuthAttemptsExceeded)
	expectRetryAfter(t, a, 1)
	clock.Advance(time.Second)
	for _, h := range replicas {
		h.token(t, "newsroom", "cms", cmsSecret)
	}
}

// TestTokenAttemptsWindow: failures further apart than the window never
// lock a client out, and failures with unknown client ids are counted by
// address alone.
func TestTokenAttemptsWindow(t *testing.T) {
	ns := startNATS(t)
	clock := newStoppedClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	o := bus.Options{Clock: clock, TokenAttempts: &bus.TokenAttempts{PerClient: 3, PerAddress: 5, Window: time.Minute}}
	replicas := []*harness{newReplicaWith(t, ns, o, workspaceConfig("newsroom")), newReplicaWith(t, ns, o, workspaceConfig("newsroom"))}

	// Two failures per window, for five windows: never three in one.
	for i := range 10 {
		expect(t, replicas[i%2].tokenAnswer(t, "cms", "wrong"), http.StatusUnauthorized, rules.AuthCredentialsInvalid)
		if i%2 == 1 {
			clock.Advance(time.Minute)
		}
	}
	replicas[0].token(t, "newsroom", "cms", cmsSecret)

	// Guessed client ids: five failures from this address lock the address
	// out, whatever client id it sends next.
	for i := range 5 {
		expect(t, replicas[i%2].tokenAnswer(t, uuid.NewString(), "guess"), http.StatusUnauthorized, rules.AuthCredentialsInvalid)
	}
	for _, h := range replicas {
		a := h.tokenAnswer(t, "wire", wireSecret)
		expect(t, a, http.StatusTooManyRequests, rules.AuthAttemptsExceeded)
		expectRetryAfter(t, a, 60)
	}
	// Only the address and the known client id have counters.
	kv, err := connectStore(t, ns).JS.KeyValue(context.Background(), limits.BucketName("newsroom"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range keys.Keys() {
		got = append(got, k)
	}
	want := map[string]bool{limits.ClientAttemptsKey("cms"): true, limits.AddressAttemptsKey("127.0.0.1"): true}
	if len(got) != len(want) || !want[got[0]] || !want[got[1]] {
		t.Fatalf("keys %v, want %v", got, want)
	}
	clock.Advance(time.Minute)
	replicas[1].token(t, "newsroom", "wire", wireSecret)
}
