package controllers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// tenantObservation is what one reconcile of a Tenant saw.
type tenantObservation struct {
	generation  int64
	workspaceID string
	endpoint    string
	desired     int32
	// compiled is true when the compile phase ran; compileErr is its
	// failure. configHash and connections describe its result.
	compiled    bool
	compileErr  error
	configHash  string
	connections int
	conflict    error
	// workspaceConflict is an older Tenant on the workspace id.
	workspaceConflict error
	// stsObserved is true when the StatefulSet phase ran; ready is its
	// number of ready replicas.
	stsObserved bool
	ready       int32
}

func observeTenant(s *tenantScope, clusterDomain string) tenantObservation {
	t := s.tenant
	o := tenantObservation{
		generation:        t.Generation,
		workspaceID:       t.EffectiveWorkspaceID(),
		endpoint:          endpoint(t, clusterDomain),
		desired:           t.EffectiveReplicas(),
		compiled:          s.configYAML != nil || s.compileErr != nil,
		compileErr:        s.compileErr,
		configHash:        s.configHash,
		connections:       s.connections,
		conflict:          s.conflict,
		stsObserved:       s.sts != nil,
		workspaceConflict: s.workspaceConflict,
	}
	if s.sts != nil {
		o.ready = s.sts.Status.ReadyReplicas
	}
	return o
}

// tenantConditions returns the conditions o decides, Ready excluded. A
// condition o says nothing about (its phase did not run) is left out, so
// the previous one stays.
func tenantConditions(o tenantObservation) []metav1.Condition {
	var cs []metav1.Condition
	if o.compiled {
		if o.compileErr != nil {
			cs = append(cs, cond(v1alpha1.ConditionConfigurationValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidConfiguration,
				"%v; the bus keeps serving the last valid configuration", o.compileErr))
		} else {
			cs = append(cs, cond(v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled,
				"configuration %s with %d connection(s)", o.configHash, o.connections))
		}
	}
	switch {
	case o.workspaceConflict != nil:
		cs = append(cs, cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonWorkspaceConflict, "%v", o.workspaceConflict))
	case o.conflict != nil:
		cs = append(cs, cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonNameConflict, "%v", o.conflict))
	case !o.stsObserved:
	case o.desired == 0:
		cs = append(cs, cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonScaledToZero, "spec.replicas is 0: no bus pod serves"))
	case o.ready >= o.desired:
		cs = append(cs, cond(v1alpha1.ConditionAvailable, metav1.ConditionTrue, v1alpha1.ReasonReplicasReady,
			"%d/%d bus replicas ready at %s", o.ready, o.desired, o.endpoint))
	default:
		cs = append(cs, cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady,
			"%d/%d bus replicas ready", o.ready, o.desired))
	}
	return cs
}

// applyTenantStatus writes the status o decides into t.
func applyTenantStatus(t *v1alpha1.Tenant, o tenantObservation) {
	t.Status.WorkspaceID = o.workspaceID
	t.Status.Endpoint = o.endpoint
	t.Status.Replicas = o.desired
	if o.stsObserved {
		t.Status.ReadyReplicas = o.ready
	}
	if o.configHash != "" {
		t.Status.ConfigHash = o.configHash
		t.Status.Connections = int32(o.connections)
	}
	setConditions(t, o.generation, tenantConditions(o), v1alpha1.ConditionConfigurationValid, v1alpha1.ConditionAvailable)
}
