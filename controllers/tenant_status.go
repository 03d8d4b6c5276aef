package controllers

import (
	"strings"

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
	// hasConfig is true when a valid configuration is in the ConfigMap
	// (hadConfig: one was before this reconcile); inForceHash is its hash.
	hasConfig    bool
	hadConfig    bool
	inForceHash  string
	compiledFrom []v1alpha1.CompiledObject
	// stsObserved is true when the StatefulSet phase ran; ready is its
	// number of ready replicas.
	stsObserved bool
	ready       int32
	// podsObserved is true when the pods phase ran: loads is what the
	// ready pods serve, problems why the others are not ready.
	podsObserved bool
	loads        []podLoad
	problems     []string
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
		hasConfig:         s.hasConfigMap,
		hadConfig:         t.Status.ConfigHash != "",
		inForceHash:       s.inForceHash(),
		compiledFrom:      s.compiledFrom,
		podsObserved:      s.podsObserved,
		loads:             s.loads,
		problems:          s.problems,
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
		switch {
		case o.compileErr != nil && o.hadConfig:
			cs = append(cs, cond(v1alpha1.ConditionConfigurationValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidConfiguration,
				"%v; the ConfigMap keeps the last valid configuration %s", o.compileErr, o.inForceHash))
		case o.compileErr != nil:
			cs = append(cs, cond(v1alpha1.ConditionConfigurationValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidConfiguration,
				"%v; there has been no valid configuration, so no bus runs", o.compileErr))
		default:
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
	case !o.hasConfig:
		cs = append(cs, cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonAwaitingConfiguration,
			"the bus is created once the Tenant has a valid configuration"))
	case o.desired == 0:
		cs = append(cs, cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonScaledToZero, "spec.replicas is 0: no bus pod serves"))
	case o.ready >= o.desired:
		cs = append(cs, cond(v1alpha1.ConditionAvailable, metav1.ConditionTrue, v1alpha1.ReasonReplicasReady,
			"%d/%d bus replicas ready at %s", o.ready, o.desired, o.endpoint))
	case len(o.problems) > 0:
		cs = append(cs, cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady,
			"%d/%d bus replicas ready: %s", o.ready, o.desired, strings.Join(o.problems, "; ")))
	default:
		cs = append(cs, cond(v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady,
			"%d/%d bus replicas ready", o.ready, o.desired))
	}
	if c, ok := loadedCondition(o); ok {
		cs = append(cs, c)
	}
	return cs
}

// loadedCondition is the ConfigurationLoaded condition; false when o does
// not decide it (no configuration yet, or the pods were not observed).
func loadedCondition(o tenantObservation) (metav1.Condition, bool) {
	if !o.podsObserved || !o.hasConfig || o.inForceHash == "" {
		return metav1.Condition{}, false
	}
	if len(o.loads) == 0 {
		return cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionFalse, v1alpha1.ReasonConfigurationNotLoaded,
			"no bus pod is ready to serve configuration %s", o.inForceHash), true
	}
	if loadedHash(o.loads) == o.inForceHash {
		return cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionTrue, v1alpha1.ReasonConfigurationLoaded,
			"every ready bus pod (%d) serves configuration %s", len(o.loads), o.inForceHash), true
	}
	return cond(v1alpha1.ConditionConfigurationLoaded, metav1.ConditionFalse, v1alpha1.ReasonConfigurationNotLoaded,
		"configuration %s is not loaded yet: %s", o.inForceHash, notLoaded(o.loads, o.inForceHash)), true
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
		if o.configHash != t.Status.ConfigHash {
			t.Status.ConfigGeneration++
		}
		t.Status.ConfigHash = o.configHash
		t.Status.Connections = int32(o.connections)
		t.Status.Compiled = o.compiledFrom
	}
	if o.podsObserved {
		t.Status.LoadedConfigHash = loadedHash(o.loads)
	}
	setConditions(t, o.generation, tenantConditions(o), v1alpha1.ConditionConfigurationValid, v1alpha1.ConditionAvailable, v1alpha1.ConditionConfigurationLoaded)
}
