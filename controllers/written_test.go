package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

func TestWrittenSkipsOnlyWhatTheCacheHasNotCaughtUpWith(t *testing.T) {
	m := &writtenMemo{last: map[writtenKey]writtenAt{}}
	k := writtenKey{kind: "ConfigMap", namespace: "ns", name: "a-bus-config"}
	if m.holds(k, "h1", "10") {
		t.Fatal("holds a write never made")
	}
	m.wrote(k, "h1", "20")
	for _, c := range []struct {
		hash, cached string
		want         bool
	}{
		{"h1", "19", true},  // the cache is behind the write: skip
		{"h1", "20", false}, // the cache shows the write: compare as usual
		{"h1", "21", false}, // someone wrote since: compare (and repair)
		{"h2", "19", false}, // something else to write
		{"h1", "", false},   // no version to compare
		{"h1", "x", false},  // not an etcd revision
	} {
		if got := m.holds(k, c.hash, c.cached); got != c.want {
			t.Errorf("holds(%s, cached %q) = %v, want %v", c.hash, c.cached, got, c.want)
		}
	}
	if m.holds(writtenKey{kind: "ConfigMap", namespace: "ns", name: "b-bus-config"}, "h1", "19") {
		t.Error("another object holds the write")
	}
}

func TestStatusHashIgnoresTransitionTimes(t *testing.T) {
	a := map[string]any{"configHash": "x", "conditions": []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}}}
	b := map[string]any{"configHash": "x", "conditions": []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-02T00:00:00Z"}}}
	c := map[string]any{"configHash": "x", "conditions": []any{map[string]any{"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-02T00:00:00Z"}}}
	ha, _ := statusHash(a)
	hb, _ := statusHash(b)
	hc, _ := statusHash(c)
	if ha != hb {
		t.Error("a transition time alone changes the hash")
	}
	if hb == hc {
		t.Error("a status change leaves the hash")
	}
	if _, ok := a["conditions"].([]any)[0].(map[string]any)["lastTransitionTime"]; !ok {
		t.Error("statusHash changed its argument")
	}
}

func TestCredentialsPending(t *testing.T) {
	now := time.Now()
	conn := func(name string, age time.Duration, conds ...metav1.Condition) v1alpha1.Connection {
		return v1alpha1.Connection{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Status:     v1alpha1.ConnectionStatus{Conditions: conds},
		}
	}
	secrets := map[string]*corev1.Secret{"old-credentials": {}, "made-credentials": {}}
	failing := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSecretNotFound}
	for _, c := range []struct {
		what  string
		conns []v1alpha1.Connection
		want  time.Duration
	}{
		{"every Secret there", []v1alpha1.Connection{conn("old", time.Hour), conn("made", time.Second)}, 0},
		{"a new Connection without its Secret", []v1alpha1.Connection{conn("made", time.Second), conn("new", 4*time.Second)}, credentialsWait - 4*time.Second},
		{"an old Connection without its Secret", []v1alpha1.Connection{conn("gone", credentialsWait+time.Minute)}, 0},
		{"a new Connection that fails", []v1alpha1.Connection{conn("new", time.Second, failing)}, 0},
	} {
		// Creation times are whole seconds on the API server; here they
		// are exact, so the wait is too.
		if got := credentialsPending(c.conns, secrets, now); got != c.want {
			t.Errorf("%s: wait %s, want %s", c.what, got, c.want)
		}
	}
}
