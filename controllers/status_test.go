package controllers

import (
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/storybus/storybus/api/v1alpha1"
)

// These tests cover the pure status functions without an API server: what
// each observation makes of the conditions, and the Ready summary.

type wantCond struct {
	typ    string
	status metav1.ConditionStatus
	reason string
}

func checkConds(t *testing.T, got []metav1.Condition, gen int64, want []wantCond) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d conditions %+v, want %d", len(got), got, len(want))
	}
	for _, w := range want {
		c := findCondition(got, w.typ)
		if c == nil || c.Status != w.status || c.Reason != w.reason {
			t.Errorf("%s: got %+v, want %s/%s", w.typ, c, w.status, w.reason)
			continue
		}
		if gen != 0 && c.ObservedGeneration != gen {
			t.Errorf("%s: observedGeneration %d, want %d", w.typ, c.ObservedGeneration, gen)
		}
	}
}

func TestTenantStatus(t *testing.T) {
	const (
		T = metav1.ConditionTrue
		F = metav1.ConditionFalse
		U = metav1.ConditionUnknown
	)
	tests := []struct {
		name string
		obs  tenantObservation
		want []wantCond
	}{{
		name: "nothing observed yet",
		obs:  tenantObservation{desired: 1},
		want: []wantCond{{v1alpha1.ConditionReady, U, v1alpha1.ReasonReconciling}},
	}, {
		name: "compiled, no replica ready",
		obs:  tenantObservation{desired: 1, compiled: true, stsObserved: true},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, F, v1alpha1.ReasonReplicasNotReady},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonReplicasNotReady},
		},
	}, {
		name: "compiled, some replicas ready",
		obs:  tenantObservation{desired: 3, ready: 2, compiled: true, stsObserved: true},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, F, v1alpha1.ReasonReplicasNotReady},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonReplicasNotReady},
		},
	}, {
		name: "compiled, every replica ready",
		obs:  tenantObservation{desired: 3, ready: 3, compiled: true, stsObserved: true},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, T, v1alpha1.ReasonReplicasReady},
			{v1alpha1.ConditionReady, T, v1alpha1.ReasonReady},
		},
	}, {
		name: "scaled to zero is never Ready",
		obs:  tenantObservation{desired: 0, ready: 0, compiled: true, stsObserved: true},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, F, v1alpha1.ReasonScaledToZero},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonScaledToZero},
		},
	}, {
		name: "invalid configuration wins over serving replicas",
		obs:  tenantObservation{desired: 1, ready: 1, compiled: true, compileErr: errors.New("bad pattern"), stsObserved: true},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, F, v1alpha1.ReasonInvalidConfiguration},
			{v1alpha1.ConditionAvailable, T, v1alpha1.ReasonReplicasReady},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonInvalidConfiguration},
		},
	}, {
		name: "name conflict",
		obs:  tenantObservation{desired: 1, compiled: true, conflict: errors.New("ConfigMap x exists")},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, F, v1alpha1.ReasonNameConflict},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonNameConflict},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tn := &v1alpha1.Tenant{}
			tn.Generation = 4
			tc.obs.generation = 4
			applyTenantStatus(tn, tc.obs)
			checkConds(t, tn.Status.Conditions, 4, tc.want)
			if tn.Status.ObservedGeneration != 4 {
				t.Errorf("observedGeneration %d", tn.Status.ObservedGeneration)
			}
		})
	}
}

// TestTenantStatusKeepsWhatWasNotObserved proves a reconcile that stopped
// early (an API error) leaves the conditions it did not observe as they
// were, transition times included.
func TestTenantStatusKeepsWhatWasNotObserved(t *testing.T) {
	tn := &v1alpha1.Tenant{}
	applyTenantStatus(tn, tenantObservation{generation: 1, desired: 1, ready: 1, compiled: true, stsObserved: true})
	before := *findCondition(tn.Status.Conditions, v1alpha1.ConditionAvailable)
	applyTenantStatus(tn, tenantObservation{generation: 2, desired: 1, compiled: true})
	after := findCondition(tn.Status.Conditions, v1alpha1.ConditionAvailable)
	if after.Status != metav1.ConditionTrue || !after.LastTransitionTime.Equal(&before.LastTransitionTime) || tn.Status.ReadyReplicas != 1 {
		t.Errorf("available %+v, readyReplicas %d", after, tn.Status.ReadyReplicas)
	}
}

func TestConnectionStatus(t *testing.T) {
	const (
		T = metav1.ConditionTrue
		F = metav1.ConditionFalse
	)
	resolved := refsObservation{checked: true}
	tests := []struct {
		name string
		obs  connectionObservation
		want []wantCond
	}{{
		name: "generated credentials, tenant found",
		obs:  connectionObservation{refs: resolved, secretSeen: true, owned: true, clientID: "cms"},
		want: []wantCond{
			{v1alpha1.ConditionResolvedRefs, T, v1alpha1.ReasonResolved},
			{v1alpha1.ConditionCredentialsReady, T, v1alpha1.ReasonCredentialsGenerated},
			{v1alpha1.ConditionReady, T, v1alpha1.ReasonReady},
		},
	}, {
		name: "reused credentials",
		obs:  connectionObservation{refs: resolved, secretSeen: true, clientID: "cms"},
		want: []wantCond{
			{v1alpha1.ConditionResolvedRefs, T, v1alpha1.ReasonResolved},
			{v1alpha1.ConditionCredentialsReady, T, v1alpha1.ReasonCredentialsReused},
			{v1alpha1.ConditionReady, T, v1alpha1.ReasonReady},
		},
	}, {
		name: "dangling tenant",
		obs:  connectionObservation{refs: refsObservation{checked: true, reason: v1alpha1.ReasonTenantNotFound, message: "Tenant x not found"}, secretSeen: true, owned: true},
		want: []wantCond{
			{v1alpha1.ConditionResolvedRefs, F, v1alpha1.ReasonTenantNotFound},
			{v1alpha1.ConditionCredentialsReady, T, v1alpha1.ReasonCredentialsGenerated},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonTenantNotFound},
		},
	}, {
		name: "secret of another connection",
		obs:  connectionObservation{refs: resolved, inUse: errors.New("Secret s is controlled by Connection c")},
		want: []wantCond{
			{v1alpha1.ConditionResolvedRefs, T, v1alpha1.ReasonResolved},
			{v1alpha1.ConditionCredentialsReady, F, v1alpha1.ReasonSecretInUse},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonSecretInUse},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1alpha1.Connection{}
			tc.obs.generation = 2
			applyConnectionStatus(c, tc.obs)
			checkConds(t, c.Status.Conditions, 2, tc.want)
		})
	}
}

func TestGrantAndPolicyStatus(t *testing.T) {
	g := &v1alpha1.Grant{}
	setConditions(g, 1, grantConditions(refsObservation{checked: true, reason: v1alpha1.ReasonConnectionNotFound}), v1alpha1.ConditionResolvedRefs)
	checkConds(t, g.Status.Conditions, 1, []wantCond{
		{v1alpha1.ConditionResolvedRefs, metav1.ConditionFalse, v1alpha1.ReasonConnectionNotFound},
		{v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConnectionNotFound},
	})
	setConditions(g, 2, grantConditions(refsObservation{checked: true}), v1alpha1.ConditionResolvedRefs)
	checkConds(t, g.Status.Conditions, 2, []wantCond{
		{v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolved},
		{v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady},
	})

	p := &v1alpha1.OwnershipPolicy{}
	setConditions(p, 1, ownershipPolicyConditions(refsObservation{checked: true}, errors.New("owners[0]: bad")), v1alpha1.ConditionAccepted, v1alpha1.ConditionResolvedRefs)
	checkConds(t, p.Status.Conditions, 1, []wantCond{
		{v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec},
		{v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolved},
		{v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec},
	})
}

func TestChangedConditions(t *testing.T) {
	before := []metav1.Condition{
		{Type: "A", Status: metav1.ConditionTrue, Reason: "R", Message: "m1"},
		{Type: "B", Status: metav1.ConditionFalse, Reason: "X"},
	}
	after := []metav1.Condition{
		{Type: "A", Status: metav1.ConditionTrue, Reason: "R", Message: "m2"}, // message only: no event
		{Type: "B", Status: metav1.ConditionFalse, Reason: "Y"},               // reason changed
		{Type: "C", Status: metav1.ConditionTrue, Reason: "Z"},                // new
	}
	got := changedConditions(before, after)
	if len(got) != 2 || got[0].Type != "B" || got[1].Type != "C" {
		t.Errorf("changed %+v", got)
	}
}

func TestRotationRequest(t *testing.T) {
	c := &v1alpha1.Connection{}
	c.Spec.Credentials.Rotate = 3
	if got := rotationRequest(c, ""); got != "3/" {
		t.Errorf("no annotation: %q", got)
	}
	c.Annotations = map[string]string{v1alpha1.AnnotationRotate: "x"}
	if got := rotationRequest(c, "3/"); got != "3/x" {
		t.Errorf("annotation: %q", got)
	}
	c.Annotations = nil
	if got := rotationRequest(c, "3/x"); got != "3/x" {
		t.Errorf("a removed annotation must not request a rotation: %q", got)
	}
}

// A known failure decides Ready even while another condition is undecided.
func TestSummarizePrefersAFailureToTheUnknown(t *testing.T) {
	list := []metav1.Condition{
		{Type: v1alpha1.ConditionAvailable, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonWorkspaceConflict, Message: "in the way"},
	}
	got := summarize(list, v1alpha1.ConditionConfigurationValid, v1alpha1.ConditionAvailable)
	if got.Status != metav1.ConditionFalse || got.Reason != v1alpha1.ReasonWorkspaceConflict || got.Message != "in the way" {
		t.Fatalf("%+v", got)
	}
	list[0].Status, list[0].Reason = metav1.ConditionTrue, v1alpha1.ReasonReplicasReady
	if got := summarize(list, v1alpha1.ConditionConfigurationValid, v1alpha1.ConditionAvailable); got.Status != metav1.ConditionUnknown || got.Reason != v1alpha1.ReasonReconciling {
		t.Fatalf("%+v", got)
	}
}

func TestWorkspaceClaimOrder(t *testing.T) {
	now := metav1.Now()
	a := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", CreationTimestamp: now}}
	b := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "x", CreationTimestamp: now}}
	if !createdBefore(a, b) || createdBefore(b, a) {
		t.Error("same second: the namespace decides, one way only")
	}
	b.CreationTimestamp = metav1.NewTime(now.Add(-time.Second))
	if !createdBefore(b, a) || createdBefore(a, b) {
		t.Error("the older Tenant comes first")
	}
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"nats://a:4222,nats://b:4222", "nats://b:4222", true},
		{"nats://a:4222", " NATS://A:4222/ ", true},
		{"nats://a", "nats://a:4222", true},
		{"tls://a:4222", "nats://user:pass@a:4222", true},
		{"nats://a:4222", "nats://a:4223", false},
		{"nats://a:4222", "nats://b:4222", false},
	} {
		if got := shareServer(tc.a, tc.b); got != tc.want {
			t.Errorf("shareServer(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

// Who holds a workspace id on a cluster: a serving bus keeps it; among the
// rest the oldest Tenant goes first; two serving buses leave it to the
// older, and the newer stops.
func TestWorkspaceClaim(t *testing.T) {
	at := func(ns string, age time.Duration) *v1alpha1.Tenant {
		return &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "desk",
			CreationTimestamp: metav1.NewTime(time.Unix(1_800_000_000, 0).Add(-age))}}
	}
	older, newer, newest := at("older", 2*time.Hour), at("newer", time.Hour), at("newest", 0)
	for name, tc := range []struct {
		self       claimant
		others     []claimant
		wantHolder *v1alpha1.Tenant
		wantStop   bool
	}{
		{claimant{newer, false}, []claimant{{older, false}}, older, false},
		{claimant{older, false}, []claimant{{newer, false}}, nil, false},
		// A new Tenant never displaces a serving one, nor does an older
		// one whose URL was edited to point at the same cluster.
		{claimant{older, false}, []claimant{{newer, true}}, newer, false},
		{claimant{newer, true}, []claimant{{older, false}}, nil, false},
		// Both serve (created together): the older keeps it.
		{claimant{newer, true}, []claimant{{older, true}}, older, true},
		{claimant{older, true}, []claimant{{newer, true}}, nil, false},
		// The serving one holds it, whatever the age of the rest.
		{claimant{older, false}, []claimant{{newest, false}, {newer, true}}, newer, false},
		{claimant{newest, false}, []claimant{{newer, false}, {older, false}}, older, false},
	} {
		holder, stop := workspaceClaim(tc.self, slices.Clone(tc.others))
		if holder != tc.wantHolder || stop != tc.wantStop {
			t.Errorf("case %d: holder %v stop %v, want %v %v", name, holder, stop, tc.wantHolder, tc.wantStop)
		}
	}
}

// Only a Connection change that can change the Tenant's configuration
// reconciles the Tenant.
func TestConnectionChangesTenant(t *testing.T) {
	base := &v1alpha1.Connection{ObjectMeta: metav1.ObjectMeta{Name: "cms", Generation: 1}}
	rotated := metav1.Now()
	for name, tc := range map[string]struct {
		change func(*v1alpha1.Connection)
		want   bool
	}{
		"spec":        {func(c *v1alpha1.Connection) { c.Generation = 2 }, true},
		"rotation":    {func(c *v1alpha1.Connection) { c.Status.CredentialsRotatedAt = &rotated }, true},
		"deletion":    {func(c *v1alpha1.Connection) { c.DeletionTimestamp = &rotated }, true},
		"conditions":  {func(c *v1alpha1.Connection) { c.Status.Conditions = []metav1.Condition{{Type: "Ready"}} }, false},
		"client id":   {func(c *v1alpha1.Connection) { c.Status.ClientID = "cms-1" }, false},
		"annotations": {func(c *v1alpha1.Connection) { c.Annotations = map[string]string{"a": "b"} }, false},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		if got := connectionChangesTenant.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: cur}); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}
