package controllers

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// tenantCase is a Tenant as the readiness controller finds it: what the
// configuration controller decided (configHash, ConfigurationValid), and
// what the bus's StatefulSet and pods say.
type tenantCase struct {
	desired, ready int32
	// valid is ConfigurationValid: nil when the configuration controller
	// has not judged the Tenant.
	valid *metav1.Condition
	// configHash is the configuration in the ConfigMap.
	configHash string
	// workload is an Available condition the workload controller holds.
	workload *metav1.Condition
	loads    []podLoad
	problems []string
}

// tenantFor builds the Tenant of c at generation 4.
func tenantFor(c tenantCase) (*v1alpha1.Tenant, *readiness) {
	tn := &v1alpha1.Tenant{}
	tn.Generation = 4
	tn.Spec.Replicas = &c.desired
	tn.Status.ConfigHash = c.configHash
	if c.valid != nil {
		setCondition(tn, *c.valid)
	}
	if c.workload != nil {
		setCondition(tn, *c.workload)
	}
	o := &readiness{loads: c.loads, problems: c.problems, sts: &appsv1.StatefulSet{}}
	o.sts.Status.ReadyReplicas = c.ready
	return tn, o
}

func TestTenantStatus(t *testing.T) {
	const (
		T = metav1.ConditionTrue
		F = metav1.ConditionFalse
	)
	compiled := &metav1.Condition{Type: v1alpha1.ConditionConfigurationValid, Status: T, Reason: v1alpha1.ReasonCompiled, Message: "ok"}
	invalid := &metav1.Condition{Type: v1alpha1.ConditionConfigurationValid, Status: F, Reason: v1alpha1.ReasonInvalidConfiguration, Message: "bad pattern"}
	tests := []struct {
		name string
		c    tenantCase
		want []wantCond
	}{{
		name: "compiled, no replica ready",
		c:    tenantCase{desired: 1, valid: compiled, configHash: "sha256:a"},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, F, v1alpha1.ReasonReplicasNotReady},
			{v1alpha1.ConditionConfigurationLoaded, F, v1alpha1.ReasonConfigurationNotLoaded},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonReplicasNotReady},
		},
	}, {
		name: "never a valid configuration: no bus",
		c:    tenantCase{desired: 1, valid: invalid},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, F, v1alpha1.ReasonInvalidConfiguration},
			{v1alpha1.ConditionAvailable, F, v1alpha1.ReasonAwaitingConfiguration},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonInvalidConfiguration},
		},
	}, {
		name: "compiled, some replicas ready",
		c:    tenantCase{desired: 3, ready: 2, valid: compiled, configHash: "sha256:a", loads: loaded("sha256:a", 2)},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, F, v1alpha1.ReasonReplicasNotReady},
			{v1alpha1.ConditionConfigurationLoaded, T, v1alpha1.ReasonConfigurationLoaded},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonReplicasNotReady},
		},
	}, {
		name: "compiled, every replica ready and serving it",
		c:    tenantCase{desired: 3, ready: 3, valid: compiled, configHash: "sha256:a", loads: loaded("sha256:a", 3)},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, T, v1alpha1.ReasonReplicasReady},
			{v1alpha1.ConditionConfigurationLoaded, T, v1alpha1.ReasonConfigurationLoaded},
			{v1alpha1.ConditionReady, T, v1alpha1.ReasonReady},
		},
	}, {
		name: "every replica ready, one serving an older configuration",
		c: tenantCase{desired: 2, ready: 2, valid: compiled, configHash: "sha256:a",
			loads: []podLoad{{pod: "x-0", hash: "sha256:a"}, {pod: "x-1", hash: "sha256:old"}}},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, T, v1alpha1.ReasonReplicasReady},
			{v1alpha1.ConditionConfigurationLoaded, F, v1alpha1.ReasonConfigurationNotLoaded},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonConfigurationNotLoaded},
		},
	}, {
		name: "every replica ready, one that cannot be asked",
		c: tenantCase{desired: 1, ready: 1, valid: compiled, configHash: "sha256:a",
			loads: []podLoad{{pod: "x-0", err: errors.New("connection refused")}}},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, T, v1alpha1.ReasonReplicasReady},
			{v1alpha1.ConditionConfigurationLoaded, F, v1alpha1.ReasonConfigurationNotLoaded},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonConfigurationNotLoaded},
		},
	}, {
		name: "scaled to zero is never Ready",
		c:    tenantCase{desired: 0, valid: compiled, configHash: "sha256:a"},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, F, v1alpha1.ReasonScaledToZero},
			{v1alpha1.ConditionConfigurationLoaded, F, v1alpha1.ReasonConfigurationNotLoaded},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonScaledToZero},
		},
	}, {
		name: "invalid configuration wins over serving replicas",
		c:    tenantCase{desired: 1, ready: 1, valid: invalid, configHash: "sha256:a", loads: loaded("sha256:a", 1)},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, F, v1alpha1.ReasonInvalidConfiguration},
			{v1alpha1.ConditionAvailable, T, v1alpha1.ReasonReplicasReady},
			{v1alpha1.ConditionConfigurationLoaded, T, v1alpha1.ReasonConfigurationLoaded},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonInvalidConfiguration},
		},
	}, {
		name: "name conflict: the workload controller's Available stays",
		c: tenantCase{desired: 1, valid: compiled, configHash: "sha256:a",
			workload: &metav1.Condition{Type: v1alpha1.ConditionAvailable, Status: F, Reason: v1alpha1.ReasonNameConflict, Message: "Service x exists"}},
		want: []wantCond{
			{v1alpha1.ConditionConfigurationValid, T, v1alpha1.ReasonCompiled},
			{v1alpha1.ConditionAvailable, F, v1alpha1.ReasonNameConflict},
			{v1alpha1.ConditionConfigurationLoaded, F, v1alpha1.ReasonConfigurationNotLoaded},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonNameConflict},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tn, o := tenantFor(tc.c)
			setReadiness(tn, o, "cluster.local")
			checkConds(t, tn.Status.Conditions, 4, tc.want)
			if tn.Status.ObservedGeneration != 4 {
				t.Errorf("observedGeneration %d", tn.Status.ObservedGeneration)
			}
		})
	}
}

// TestTenantReadyWaitsForEveryPart proves Ready is not True while a
// condition it summarises describes an older generation than the Tenant's,
// and that the readiness controller does not judge a generation the
// configuration controller has not.
func TestTenantReadyWaitsForEveryPart(t *testing.T) {
	tn, o := tenantFor(tenantCase{desired: 1, ready: 1, configHash: "sha256:a", loads: loaded("sha256:a", 1),
		valid: &metav1.Condition{Type: v1alpha1.ConditionConfigurationValid, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCompiled, Message: "ok"}})
	if !configurationDecided(tn) {
		t.Fatal("a judged generation is not decided")
	}
	tn.Generation = 5
	if configurationDecided(tn) {
		t.Error("a generation the configuration controller has not judged is decided")
	}
	setReadiness(tn, o, "cluster.local")
	if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionUnknown || c.Reason != v1alpha1.ReasonReconciling {
		t.Errorf("Ready %+v with ConfigurationValid of an older generation", c)
	}
}

// TestTenantStatusKeepsWhatWasNotObserved proves a reconcile that stopped
// early (an API error) leaves the conditions it did not decide as they
// were, transition times included, and writes nothing.
func TestTenantStatusKeepsWhatWasNotObserved(t *testing.T) {
	tn := &v1alpha1.Tenant{}
	tn.Generation = 1
	s := &configurationScope{tenant: tn, hasConfigMap: true, configHash: "sha256:a", connections: 2}
	s.setStatus()
	before := tn.DeepCopy()
	tn.Generation = 2
	(&configurationScope{tenant: tn}).setStatus()
	after := findCondition(tn.Status.Conditions, v1alpha1.ConditionConfigurationValid)
	was := findCondition(before.Status.Conditions, v1alpha1.ConditionConfigurationValid)
	if after.Status != metav1.ConditionTrue || after.ObservedGeneration != 1 || !after.LastTransitionTime.Equal(&was.LastTransitionTime) ||
		tn.Status.ConfigHash != "sha256:a" || tn.Status.Connections != 2 || tn.Status.ConfigGeneration != 1 {
		t.Errorf("ConfigurationValid %+v, status %+v", after, tn.Status)
	}
	// The write compares with the Tenant as read: nothing of the part
	// changed, so nothing is sent (the client would fail the test).
	if err := configurationStatus.write(context.Background(), nil, nil, tn, before); err != nil {
		t.Errorf("write of an unchanged part: %v", err)
	}
}

// loaded is n ready pods serving hash.
func loaded(hash string, n int) []podLoad {
	var out []podLoad
	for i := range n {
		out = append(out, podLoad{pod: "bus-" + strconv.Itoa(i), hash: hash})
	}
	return out
}

// The ConfigurationValid message says what is true: the last valid
// configuration is kept only when there was one.
func TestTenantInvalidConfigurationMessage(t *testing.T) {
	for _, tc := range []struct {
		hadConfig string
		want      string
	}{
		{"", "policies[0] x: rego_parse_error; there has been no valid configuration, so no bus runs"},
		{"sha256:a", "policies[0] x: rego_parse_error; the ConfigMap keeps the last valid configuration sha256:a"},
	} {
		tn := &v1alpha1.Tenant{}
		tn.Status.ConfigHash = tc.hadConfig
		s := &configurationScope{tenant: tn, compileErr: errors.New("policies[0] x: rego_parse_error")}
		s.setStatus()
		c := findCondition(tn.Status.Conditions, v1alpha1.ConditionConfigurationValid)
		if c == nil || c.Message != tc.want || tn.Status.ConfigHash != tc.hadConfig {
			t.Errorf("got %+v (configHash %q), want message %q", c, tn.Status.ConfigHash, tc.want)
		}
	}
}

func TestConnectionStatus(t *testing.T) {
	const (
		T = metav1.ConditionTrue
		F = metav1.ConditionFalse
	)
	resolved := refsObservation{checked: true}
	conn := func() *v1alpha1.Connection {
		return &v1alpha1.Connection{ObjectMeta: metav1.ObjectMeta{Name: "cms", Generation: 2}}
	}
	secret := &corev1.Secret{Data: map[string][]byte{v1alpha1.CredentialsClientIDKey: []byte("cms")}}
	serving := servingTenant(v1alpha1.CompiledObject{Kind: "Connection", Name: "cms", Generation: 2})
	tests := []struct {
		name  string
		scope connectionScope
		want  []wantCond
	}{{
		name:  "generated credentials, tenant found",
		scope: connectionScope{conn: conn(), refs: resolved, tenant: serving, sec: secret, owned: true},
		want: []wantCond{
			{v1alpha1.ConditionResolvedRefs, T, v1alpha1.ReasonResolved},
			{v1alpha1.ConditionCredentialsReady, T, v1alpha1.ReasonCredentialsGenerated},
			{v1alpha1.ConditionInForce, T, v1alpha1.ReasonConfigurationLoaded},
			{v1alpha1.ConditionReady, T, v1alpha1.ReasonReady},
		},
	}, {
		name:  "reused credentials",
		scope: connectionScope{conn: conn(), refs: resolved, tenant: serving, sec: secret},
		want: []wantCond{
			{v1alpha1.ConditionResolvedRefs, T, v1alpha1.ReasonResolved},
			{v1alpha1.ConditionCredentialsReady, T, v1alpha1.ReasonCredentialsReused},
			{v1alpha1.ConditionInForce, T, v1alpha1.ReasonConfigurationLoaded},
			{v1alpha1.ConditionReady, T, v1alpha1.ReasonReady},
		},
	}, {
		name:  "not compiled yet",
		scope: connectionScope{conn: conn(), refs: resolved, tenant: servingTenant(), sec: secret, owned: true},
		want: []wantCond{
			{v1alpha1.ConditionResolvedRefs, T, v1alpha1.ReasonResolved},
			{v1alpha1.ConditionCredentialsReady, T, v1alpha1.ReasonCredentialsGenerated},
			{v1alpha1.ConditionInForce, F, v1alpha1.ReasonNotCompiled},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonNotCompiled},
		},
	}, {
		name:  "dangling tenant",
		scope: connectionScope{conn: conn(), refs: refsObservation{checked: true, reason: v1alpha1.ReasonTenantNotFound, message: "Tenant x not found"}, sec: secret, owned: true},
		want: []wantCond{
			{v1alpha1.ConditionResolvedRefs, F, v1alpha1.ReasonTenantNotFound},
			{v1alpha1.ConditionCredentialsReady, T, v1alpha1.ReasonCredentialsGenerated},
			{v1alpha1.ConditionInForce, F, v1alpha1.ReasonTenantNotFound},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonTenantNotFound},
		},
	}, {
		name:  "secret of another connection",
		scope: connectionScope{conn: conn(), refs: resolved, tenant: serving, inUse: errors.New("Secret s is controlled by Connection c")},
		want: []wantCond{
			{v1alpha1.ConditionResolvedRefs, T, v1alpha1.ReasonResolved},
			{v1alpha1.ConditionCredentialsReady, F, v1alpha1.ReasonSecretInUse},
			{v1alpha1.ConditionReady, F, v1alpha1.ReasonSecretInUse},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			setConnectionStatus(&tc.scope)
			checkConds(t, tc.scope.conn.Status.Conditions, 2, tc.want)
		})
	}
}

func TestGrantAndPolicyStatus(t *testing.T) {
	g := &v1alpha1.Grant{ObjectMeta: metav1.ObjectMeta{Name: "g", Generation: 1}}
	setConditions(g, 1, referenceConditions("Grant", refsObservation{checked: true, reason: v1alpha1.ReasonConnectionNotFound}, nil, false, nil, g), v1alpha1.ConditionResolvedRefs, v1alpha1.ConditionInForce)
	checkConds(t, g.Status.Conditions, 1, []wantCond{
		{v1alpha1.ConditionResolvedRefs, metav1.ConditionFalse, v1alpha1.ReasonConnectionNotFound},
		{v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonConnectionNotFound},
		{v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConnectionNotFound},
	})
	serving := servingTenant(v1alpha1.CompiledObject{Kind: "Grant", Name: "g", Generation: 1})
	setConditions(g, 1, referenceConditions("Grant", refsObservation{checked: true}, nil, false, serving, g), v1alpha1.ConditionResolvedRefs, v1alpha1.ConditionInForce)
	checkConds(t, g.Status.Conditions, 1, []wantCond{
		{v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolved},
		{v1alpha1.ConditionInForce, metav1.ConditionTrue, v1alpha1.ReasonConfigurationLoaded},
		{v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady},
	})

	p := &v1alpha1.OwnershipPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1}}
	frozen := servingTenant()
	frozen.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionConfigurationValid, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonInvalidConfiguration, Message: "owners[0]: bad"}}
	setConditions(p, 1, referenceConditions("OwnershipPolicy", refsObservation{checked: true}, errors.New("owners[0]: bad"), true, frozen, p),
		v1alpha1.ConditionAccepted, v1alpha1.ConditionResolvedRefs, v1alpha1.ConditionInForce)
	checkConds(t, p.Status.Conditions, 1, []wantCond{
		{v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec},
		{v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolved},
		{v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonTenantConfigurationInvalid},
		{v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec},
	})
	if c := findCondition(p.Status.Conditions, v1alpha1.ConditionResolvedRefs); strings.Contains(c.Message, "folded") {
		t.Errorf("the bad policy claims it was folded in: %q", c.Message)
	}
}

// servingTenant is a Tenant whose bus pods serve the configuration
// compiled from objs.
func servingTenant(objs ...v1alpha1.CompiledObject) *v1alpha1.Tenant {
	t := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "newsroom"}}
	t.Status.ConfigHash, t.Status.LoadedConfigHash, t.Status.ConfigGeneration = "sha256:a", "sha256:a", 3
	t.Status.Compiled = objs
	return t
}

// An object is in force only when its current generation (and, for a
// Connection, its current credentials) is compiled into the configuration
// the bus pods serve.
func TestInForceCondition(t *testing.T) {
	rotated := metav1.NewTime(time.Unix(1_800_000_000, 0))
	later := metav1.NewTime(rotated.Add(time.Second))
	grant := v1alpha1.CompiledObject{Kind: "Grant", Name: "g", Generation: 2}
	conn := v1alpha1.CompiledObject{Kind: "Connection", Name: "c", Generation: 1, CredentialsRotatedAt: &rotated}
	invalid := servingTenant(grant)
	invalid.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionConfigurationValid, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonInvalidConfiguration, Message: "policies[0] x: rego_parse_error"}}
	notLoadedYet := servingTenant(grant)
	notLoadedYet.Status.LoadedConfigHash = "sha256:old"
	for name, tc := range map[string]struct {
		refs      refsObservation
		t         *v1alpha1.Tenant
		kind      string
		name      string
		gen       int64
		rotatedAt *metav1.Time
		status    metav1.ConditionStatus
		reason    string
		message   string
	}{
		"in force":                    {t: servingTenant(grant), kind: "Grant", name: "g", gen: 2, status: metav1.ConditionTrue, reason: v1alpha1.ReasonConfigurationLoaded},
		"older generation compiled":   {t: servingTenant(grant), kind: "Grant", name: "g", gen: 3, status: metav1.ConditionFalse, reason: v1alpha1.ReasonNotCompiled},
		"not in the configuration":    {t: servingTenant(grant), kind: "Grant", name: "other", gen: 1, status: metav1.ConditionFalse, reason: v1alpha1.ReasonNotCompiled},
		"same name, another kind":     {t: servingTenant(grant), kind: "OwnershipPolicy", name: "g", gen: 2, status: metav1.ConditionFalse, reason: v1alpha1.ReasonNotCompiled},
		"frozen by the Tenant":        {t: invalid, kind: "Grant", name: "new", gen: 1, status: metav1.ConditionFalse, reason: v1alpha1.ReasonTenantConfigurationInvalid, message: "rego_parse_error"},
		"in the last valid one":       {t: invalid, kind: "Grant", name: "g", gen: 2, status: metav1.ConditionTrue, reason: v1alpha1.ReasonConfigurationLoaded},
		"compiled, not loaded":        {t: notLoadedYet, kind: "Grant", name: "g", gen: 2, status: metav1.ConditionFalse, reason: v1alpha1.ReasonTenantNotServing},
		"credentials in force":        {t: servingTenant(conn), kind: "Connection", name: "c", gen: 1, rotatedAt: &rotated, status: metav1.ConditionTrue, reason: v1alpha1.ReasonConfigurationLoaded},
		"rotation not yet compiled":   {t: servingTenant(conn), kind: "Connection", name: "c", gen: 1, rotatedAt: &later, status: metav1.ConditionFalse, reason: v1alpha1.ReasonNotCompiled},
		"first rotation not compiled": {t: servingTenant(v1alpha1.CompiledObject{Kind: "Connection", Name: "c", Generation: 1}), kind: "Connection", name: "c", gen: 1, rotatedAt: &rotated, status: metav1.ConditionFalse, reason: v1alpha1.ReasonNotCompiled},
		"dangling reference": {refs: refsObservation{checked: true, reason: v1alpha1.ReasonTenantNotFound, message: "Tenant x not found"}, t: &v1alpha1.Tenant{},
			kind: "Grant", name: "g", gen: 1, status: metav1.ConditionFalse, reason: v1alpha1.ReasonTenantNotFound},
	} {
		c := inForceCondition(tc.refs, tc.t, tc.kind, tc.name, tc.gen, tc.rotatedAt)
		if c.Type != v1alpha1.ConditionInForce || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
			t.Errorf("%s: %+v, want %s/%s with %q", name, c, tc.status, tc.reason, tc.message)
		}
	}
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

// Status-only writes of a Connection, Grant, OwnershipPolicy or Tenant do
// not reconcile the objects that watch it; spec changes and deletions do.
func TestSpecChanged(t *testing.T) {
	base := &v1alpha1.Connection{ObjectMeta: metav1.ObjectMeta{Name: "cms", Generation: 1}}
	rotated := metav1.Now()
	for name, tc := range map[string]struct {
		change func(*v1alpha1.Connection)
		want   bool
	}{
		"spec":        {func(c *v1alpha1.Connection) { c.Generation = 2 }, true},
		"deletion":    {func(c *v1alpha1.Connection) { c.DeletionTimestamp = &rotated }, true},
		"rotation":    {func(c *v1alpha1.Connection) { c.Status.CredentialsRotatedAt = &rotated }, false},
		"conditions":  {func(c *v1alpha1.Connection) { c.Status.Conditions = []metav1.Condition{{Type: "Ready"}} }, false},
		"client id":   {func(c *v1alpha1.Connection) { c.Status.ClientID = "cms-1" }, false},
		"annotations": {func(c *v1alpha1.Connection) { c.Annotations = map[string]string{"a": "b"} }, false},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		if got := specChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: cur}); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

// A Tenant's status writes reach its dependents only when they change what
// is in force.
func TestTenantInForceChanged(t *testing.T) {
	base := servingTenant(v1alpha1.CompiledObject{Kind: "Grant", Name: "g", Generation: 1})
	base.Generation = 1
	for name, tc := range map[string]struct {
		change func(*v1alpha1.Tenant)
		want   bool
	}{
		"spec":           {func(t *v1alpha1.Tenant) { t.Generation = 2 }, true},
		"compiled":       {func(t *v1alpha1.Tenant) { t.Status.Compiled[0].Generation = 2 }, true},
		"config hash":    {func(t *v1alpha1.Tenant) { t.Status.ConfigHash = "sha256:b" }, true},
		"loaded":         {func(t *v1alpha1.Tenant) { t.Status.LoadedConfigHash = "" }, true},
		"ready":          {func(t *v1alpha1.Tenant) { t.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "False"}} }, true},
		"ready replicas": {func(t *v1alpha1.Tenant) { t.Status.ReadyReplicas = 3 }, false},
		"available": {func(t *v1alpha1.Tenant) {
			t.Status.Conditions = []metav1.Condition{{Type: "Available", Status: "False"}}
		}, false},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		if got := tenantInForceChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: cur}); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

// TestConditionEventsRecordFailuresNotProgress: a failure is a Warning, its
// end is Normal, a Tenant's Ready reached or lost is recorded; progress is
// not.
func TestConditionEventsRecordFailuresNotProgress(t *testing.T) {
	c := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason}
	}
	notCompiled := c(v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonNotCompiled)
	loaded := c(v1alpha1.ConditionInForce, metav1.ConditionTrue, v1alpha1.ReasonConfigurationLoaded)
	notFound := c(v1alpha1.ConditionResolvedRefs, metav1.ConditionFalse, v1alpha1.ReasonTenantNotFound)
	resolved := c(v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolved)
	waiting := c(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady)
	ready := c(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	for name, tc := range map[string]struct {
		obj           client.Object
		before, after []metav1.Condition
		want          []string
	}{
		"a new Connection on its way":   {obj: &v1alpha1.Connection{}, after: []metav1.Condition{resolved, notCompiled}},
		"a Connection in force":         {obj: &v1alpha1.Connection{}, before: []metav1.Condition{resolved, notCompiled}, after: []metav1.Condition{resolved, loaded, ready}},
		"a dangling reference":          {obj: &v1alpha1.Grant{}, after: []metav1.Condition{notFound}, want: []string{"Warning TenantNotFound"}},
		"the reference resolves":        {obj: &v1alpha1.Grant{}, before: []metav1.Condition{notFound}, after: []metav1.Condition{resolved, notCompiled}, want: []string{"Normal Resolved"}},
		"a Tenant waiting for replicas": {obj: &v1alpha1.Tenant{}, after: []metav1.Condition{waiting}},
		"a Tenant Ready":                {obj: &v1alpha1.Tenant{}, before: []metav1.Condition{waiting}, after: []metav1.Condition{ready}, want: []string{"Normal Ready"}},
		"a Tenant no longer Ready":      {obj: &v1alpha1.Tenant{}, before: []metav1.Condition{ready}, after: []metav1.Condition{waiting}, want: []string{"Warning ReplicasNotReady"}},
		"a Connection's Ready":          {obj: &v1alpha1.Connection{}, before: []metav1.Condition{ready}, after: []metav1.Condition{waiting}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.obj.SetUID(types.UID(uuid.NewString()))
			rec := events.NewFakeRecorder(10)
			recordConditionEvents(rec, tc.obj, tc.before, tc.after)
			close(rec.Events)
			var got []string
			for e := range rec.Events {
				typ, rest, _ := strings.Cut(e, " ")
				reason, _, _ := strings.Cut(rest, " ")
				got = append(got, typ+" "+reason)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("events %q, want %q", got, tc.want)
			}
		})
	}
}

// TestProgressWaitsItsGrace: a status that shows only progress is written
// once it has lasted progressGrace at one generation; a failure, or a
// status leaving one, is written at once.
func TestProgressWaitsItsGrace(t *testing.T) {
	m := &progressMemo{since: map[types.UID]progressSeen{}}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	conn := func(gen int64, cs ...metav1.Condition) *v1alpha1.Connection {
		c := &v1alpha1.Connection{}
		c.UID, c.Generation, c.Status.Conditions = "c1", gen, cs
		return c
	}
	onWay := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNotCompiled}
	failed := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonTenantNotFound}
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReady}

	if w := m.wait(conn(1, onWay), conn(1), nil, at); w != progressGrace {
		t.Errorf("a new object's first step waits %s, want %s", w, progressGrace)
	}
	if w := m.wait(conn(1, onWay), conn(1), nil, at.Add(4*time.Second)); w != progressGrace-4*time.Second {
		t.Errorf("4 s later it waits %s", w)
	}
	if w := m.wait(conn(1, onWay), conn(1), nil, at.Add(progressGrace)); w != 0 {
		t.Errorf("after the grace it waits %s, want 0", w)
	}
	if w := m.wait(conn(2, onWay), conn(1, ready), nil, at.Add(time.Minute)); w != 0 {
		t.Errorf("a Ready object's next generation waits %s: its Ready is not progress", w)
	}
	if w := m.wait(conn(2, onWay), conn(2, onWay), nil, at.Add(time.Minute)); w != progressGrace {
		t.Errorf("a new generation's progress waits %s, want %s", w, progressGrace)
	}
	if w := m.wait(conn(2, failed), conn(2, onWay), nil, at.Add(time.Minute)); w != 0 {
		t.Errorf("a failure waits %s", w)
	}
	if w := m.wait(conn(2, onWay), conn(2, failed), nil, at.Add(time.Minute)); w != 0 {
		t.Errorf("progress after a failure waits %s: the failure would stay on show", w)
	}
}

// TestProgressHeldWhileItsTenantWaitsForItsFirstCompile: a dependent's
// progress is not written while its Tenant has compiled nothing, for at
// most credentialsWait after the Tenant's creation; its grace counts from
// the Tenant's first compile.
func TestProgressHeldWhileItsTenantWaitsForItsFirstCompile(t *testing.T) {
	m := &progressMemo{since: map[types.UID]progressSeen{}}
	created := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	grant := func(cs ...metav1.Condition) *v1alpha1.Grant {
		g := &v1alpha1.Grant{}
		g.UID, g.Generation, g.Status.Conditions = "g1", 1, cs
		return g
	}
	onWay := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNotCompiled}
	tenant := &v1alpha1.Tenant{}
	tenant.CreationTimestamp = metav1.NewTime(created)

	at := created.Add(5 * time.Second)
	if w := m.wait(grant(onWay), grant(), tenant, at); w != credentialsWait-5*time.Second {
		t.Errorf("while its Tenant has compiled nothing it waits %s, want %s", w, credentialsWait-5*time.Second)
	}
	if w := m.wait(grant(onWay), grant(), tenant, created.Add(time.Minute)); w != credentialsWait-time.Minute {
		t.Errorf("a minute on, past its own grace, it waits %s, want %s", w, credentialsWait-time.Minute)
	}
	if w := m.wait(grant(onWay), grant(), tenant, created.Add(credentialsWait)); w != 0 {
		t.Errorf("credentialsWait after the Tenant's creation it waits %s, want 0", w)
	}

	compiledAt := created.Add(70 * time.Second)
	tenant.Status.ConfigHash = "sha256:first"
	tenant.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionConfigurationValid, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonCompiled, LastTransitionTime: metav1.NewTime(compiledAt)}}
	if w := m.wait(grant(onWay), grant(), tenant, compiledAt.Add(time.Second)); w != progressGrace-time.Second {
		t.Errorf("a second after the first compile it waits %s, want %s", w, progressGrace-time.Second)
	}
	if w := m.wait(grant(onWay), grant(), tenant, compiledAt.Add(progressGrace)); w != 0 {
		t.Errorf("progressGrace after the first compile it waits %s, want 0", w)
	}

	invalid := &v1alpha1.Tenant{}
	invalid.CreationTimestamp = metav1.NewTime(created)
	invalid.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionConfigurationValid, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonInvalidConfiguration, LastTransitionTime: metav1.NewTime(created)}}
	m = &progressMemo{since: map[types.UID]progressSeen{}}
	if w := m.wait(grant(onWay), grant(), invalid, created.Add(time.Second)); w != progressGrace {
		t.Errorf("with a configuration that does not compile it waits %s, want its own grace, %s", w, progressGrace)
	}
}

// TestReadinessProgressWaitsItsGrace: a Tenant's readiness that shows
// only progress, after none or after progress, is written once it has
// lasted readinessGrace, and the next such step readinessGrace after
// that; Ready reached or lost, a failure and a deletion are written at
// once.
func TestReadinessProgressWaitsItsGrace(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	tenant := func(uid types.UID, cs ...metav1.Condition) *v1alpha1.Tenant {
		tn := &v1alpha1.Tenant{}
		tn.UID, tn.Generation, tn.Status.Conditions = uid, 1, cs
		return tn
	}
	notReady := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonReplicasNotReady}
	notLoaded := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonConfigurationNotLoaded}
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReady}
	refused := metav1.Condition{Type: v1alpha1.ConditionConfigurationLoaded, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonConfigurationRefused}
	compiled := metav1.Condition{Type: v1alpha1.ConditionConfigurationValid, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCompiled}

	if w := readinessHeld(tenant("unit-new", compiled, notReady), tenant("unit-new", compiled), at); w != readinessGrace {
		t.Errorf("a new Tenant's first progress waits %s, want %s", w, readinessGrace)
	}
	if w := readinessHeld(tenant("unit-new", compiled, notReady), tenant("unit-new", compiled), at.Add(time.Second)); w != readinessGrace-time.Second {
		t.Errorf("a second later it waits %s, want %s", w, readinessGrace-time.Second)
	}
	if w := readinessHeld(tenant("unit-new", compiled, notReady), tenant("unit-new", compiled), at.Add(readinessGrace)); w != 0 {
		t.Errorf("after the grace it waits %s, want 0", w)
	}
	next := at.Add(readinessGrace + time.Second)
	if w := readinessHeld(tenant("unit-new", compiled, notLoaded), tenant("unit-new", compiled, notReady), next); w != readinessGrace-time.Second {
		t.Errorf("the next step, a second after the first was written, waits %s, want %s", w, readinessGrace-time.Second)
	}
	if w := readinessHeld(tenant("unit-new", compiled, ready), tenant("unit-new", compiled, notReady), next); w != 0 {
		t.Errorf("Ready reached waits %s", w)
	}
	if w := readinessHeld(tenant("unit-same", compiled, notReady), tenant("unit-same", compiled, notReady), at); w != 0 {
		t.Errorf("a readiness that did not change waits %s: it writes nothing", w)
	}
	if w := readinessHeld(tenant("unit-ready", compiled, ready), tenant("unit-ready", compiled), at); w != 0 {
		t.Errorf("Ready reached at once waits %s", w)
	}
	if w := readinessHeld(tenant("unit-refused", compiled, refused, notLoaded), tenant("unit-refused", compiled), at); w != 0 {
		t.Errorf("a refused configuration waits %s: it is a failure to report", w)
	}
	if w := readinessHeld(tenant("unit-lost", compiled, notLoaded), tenant("unit-lost", compiled, ready), at); w != 0 {
		t.Errorf("Ready lost waits %s", w)
	}
	gone := tenant("unit-gone", compiled, notLoaded)
	gone.DeletionTimestamp = &metav1.Time{Time: at}
	if w := readinessHeld(gone, tenant("unit-gone", compiled), at); w != 0 {
		t.Errorf("a Tenant being deleted waits %s", w)
	}
}

// TestPooledTenantPlacementWaitsForItsFirstCompile: a new pooled Tenant
// whose first compile is on its way (progressHeld) gets no PoolReady
// AwaitingConfiguration, only a look again when the wait ends; one past
// the wait, or whose configuration does not compile, is told why it is
// not placed.
func TestPooledTenantPlacementWaitsForItsFirstCompile(t *testing.T) {
	scope := func(created time.Time, cs ...metav1.Condition) *poolScope {
		tn := &v1alpha1.Tenant{}
		tn.CreationTimestamp, tn.Status.Conditions = metav1.NewTime(created), cs
		return &poolScope{tenant: tn, pool: &v1alpha1.BusPool{ObjectMeta: metav1.ObjectMeta{Namespace: "pools", Name: "shared"}}}
	}
	r := &TenantPoolReconciler{}
	s := scope(time.Now())
	if _, err := r.place(context.Background(), s); !errors.Is(err, errPhasesDone) || s.placed != nil || s.requeue <= 0 || s.requeue > credentialsWait {
		t.Errorf("a new Tenant: placed %+v, requeue %s, %v; want nothing to write and a look again within %s", s.placed, s.requeue, err, credentialsWait)
	}
	s = scope(time.Now().Add(-credentialsWait - time.Second))
	if _, err := r.place(context.Background(), s); !errors.Is(err, errPhasesDone) || s.placed == nil || s.placed.Reason != v1alpha1.ReasonAwaitingConfiguration {
		t.Errorf("past the credentials wait: placed %+v, %v; want %s", s.placed, err, v1alpha1.ReasonAwaitingConfiguration)
	}
	invalid := metav1.Condition{Type: v1alpha1.ConditionConfigurationValid, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonInvalidConfiguration}
	s = scope(time.Now(), invalid)
	if _, err := r.place(context.Background(), s); !errors.Is(err, errPhasesDone) || s.placed == nil || s.placed.Reason != v1alpha1.ReasonAwaitingConfiguration {
		t.Errorf("a configuration that does not compile: placed %+v, %v; want %s", s.placed, err, v1alpha1.ReasonAwaitingConfiguration)
	}
}

// TestStatusObjectsHaveAStatus: patchStatus writes the Status field of
// the kinds it is given; each of them has one.
func TestStatusObjectsHaveAStatus(t *testing.T) {
	for _, obj := range []statusObject{&v1alpha1.Connection{}, &v1alpha1.Grant{}, &v1alpha1.OwnershipPolicy{}, &v1alpha1.BusPool{}, &v1alpha1.Tenant{}} {
		if !reflect.ValueOf(obj).Elem().FieldByName("Status").IsValid() {
			t.Errorf("%T has no Status field", obj)
		}
	}
}

// TestPoolCountsAreWrittenAtMostEvery: a pool status whose counts alone
// changed waits poolCountsEvery after the last write; any other change,
// or counts after that, are written at once.
func TestPoolCountsAreWrittenAtMostEvery(t *testing.T) {
	var c countThrottle
	pool := types.NamespacedName{Namespace: "pools", Name: "shared"}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	st := func(tenants, workspaces int32, ready bool) *v1alpha1.BusPoolStatus {
		// Available and Ready quote the Tenants served, as the pool
		// controller writes them.
		available := cond(v1alpha1.ConditionAvailable, metav1.ConditionTrue, v1alpha1.ReasonReplicasReady, "1/1 replicas ready, serving %d Tenant(s)", tenants)
		if !ready {
			available = cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady, "0/1 replicas ready")
		}
		readyCond := available
		readyCond.Type = v1alpha1.ConditionReady
		return &v1alpha1.BusPoolStatus{Tenants: tenants, Conditions: []metav1.Condition{available, readyCond},
			ReplicaStatuses: []v1alpha1.BusPoolReplicaStatus{{Name: "shared-pool-0", Ready: ready, Workspaces: workspaces}}}
	}
	if w := c.wait(pool, st(1, 1, true), st(2, 2, true), at); w != 0 {
		t.Errorf("counts never written before wait %s, want 0", w)
	}
	c.wrote(pool, at)
	if w := c.wait(pool, st(2, 2, true), st(3, 2, true), at.Add(time.Second)); w != poolCountsEvery-time.Second {
		t.Errorf("a count a second after the last write waits %s, want %s", w, poolCountsEvery-time.Second)
	}
	if w := c.wait(pool, st(2, 2, true), st(3, 3, false), at.Add(time.Second)); w != 0 {
		t.Errorf("a replica no longer ready waits %s, want 0", w)
	}
	if w := c.wait(pool, st(2, 2, true), st(3, 3, true), at.Add(poolCountsEvery)); w != 0 {
		t.Errorf("counts poolCountsEvery after the last write wait %s, want 0", w)
	}
	if w := c.wait(pool, st(2, 2, true), st(2, 2, true), at.Add(time.Second)); w != 0 {
		t.Errorf("no change waits %s, want 0", w)
	}
	other := types.NamespacedName{Namespace: "pools", Name: "other"}
	if w := c.wait(other, st(2, 2, true), st(3, 3, true), at.Add(time.Second)); w != 0 {
		t.Errorf("another pool's counts wait %s, want 0", w)
	}
}

// TestAConnectionWithoutItsSecretIsOnItsWay: until its credentials
// Secret is made (or taken in by the credentials controller), a
// Connection's CredentialsReady and InForce say it is on the way, never
// the last generation's values, and never a failure that would end its
// Tenant's wait for credentials.
func TestAConnectionWithoutItsSecretIsOnItsWay(t *testing.T) {
	c := &v1alpha1.Connection{}
	c.Name, c.Generation = "cms", 2
	tenant := &v1alpha1.Tenant{}
	tenant.Name = "newsroom"
	cs := connectionConditions(&connectionScope{conn: c, refs: refsObservation{checked: true}, tenant: tenant}, nil)
	creds := meta.FindStatusCondition(cs, v1alpha1.ConditionCredentialsReady)
	inForce := meta.FindStatusCondition(cs, v1alpha1.ConditionInForce)
	if creds == nil || creds.Status != metav1.ConditionUnknown || creds.Reason != v1alpha1.ReasonReconciling {
		t.Errorf("CredentialsReady %+v, want Unknown/Reconciling", creds)
	}
	if inForce == nil || inForce.Status != metav1.ConditionFalse || inForce.Reason != v1alpha1.ReasonNotCompiled {
		t.Errorf("InForce %+v, want False/NotCompiled", inForce)
	}
	if !onlyProgress(cs) {
		t.Errorf("conditions %+v are not progress: the Tenant's compile would stop waiting for the Secret", cs)
	}

	sec := &corev1.Secret{Data: map[string][]byte{v1alpha1.CredentialsClientIDKey: []byte("cms")}}
	if credentialsKept(sec) {
		t.Error("a Secret without its secret and annotations counts as taken in")
	}
	sec.Data[v1alpha1.CredentialsClientSecretKey] = []byte("a-secret-the-user-put-there-0123456789")
	sec.Annotations = map[string]string{v1alpha1.AnnotationRotationHandled: "0/", v1alpha1.AnnotationSecretHash: secretHash(sec)}
	if !credentialsKept(sec) {
		t.Error("a Secret with its hash recorded does not count as taken in")
	}
	sec.Data[v1alpha1.CredentialsClientSecretKey] = []byte("changed-by-hand-0123456789abcdef012345")
	if credentialsKept(sec) {
		t.Error("a Secret changed by hand counts as taken in before its change is")
	}
}
