package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/storybus/storybus/api/v1alpha1"
)

// statusObject is an object of api/v1alpha1 with conditions.
type statusObject interface {
	client.Object
	v1alpha1.ConditionedObject
}

// cond builds a condition; setConditions stamps its generation.
func cond(typ string, status metav1.ConditionStatus, reason, format string, args ...any) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// setConditions sets each of cs (keeping the transition time of one whose
// status did not change) and then Ready, summarised from the types in
// order, all stamped with generation gen.
func setConditions(obj v1alpha1.ConditionedObject, gen int64, cs []metav1.Condition, summaryOf ...string) {
	list := obj.GetConditions()
	for _, c := range cs {
		c.ObservedGeneration = gen
		meta.SetStatusCondition(&list, c)
	}
	ready := summarize(list, summaryOf...)
	ready.ObservedGeneration = gen
	meta.SetStatusCondition(&list, ready)
	obj.SetConditions(list)
	obj.SetObservedGeneration(gen)
}

// summarize returns the Ready condition: the first of the types in order
// that is False decides it; else the first that is Unknown or missing (the
// operator has not decided yet) makes it Unknown; when all are True, Ready
// is True. A known failure is reported even while another condition is
// still undecided.
func summarize(list []metav1.Condition, types ...string) metav1.Condition {
	for _, t := range types {
		if c := meta.FindStatusCondition(list, t); c != nil && c.Status == metav1.ConditionFalse {
			return cond(v1alpha1.ConditionReady, metav1.ConditionFalse, c.Reason, "%s", c.Message)
		}
	}
	var msgs []string
	for _, t := range types {
		c := meta.FindStatusCondition(list, t)
		switch {
		case c == nil:
			return cond(v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonReconciling, "%s is not yet known", t)
		case c.Status != metav1.ConditionTrue:
			return cond(v1alpha1.ConditionReady, metav1.ConditionUnknown, c.Reason, "%s", c.Message)
		}
		msgs = append(msgs, c.Message)
	}
	msg := ""
	if len(msgs) > 0 {
		msg = msgs[len(msgs)-1]
	}
	return cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady, "%s", msg)
}

// changedConditions returns the conditions of after whose status or reason
// differ from before (or that before lacks).
func changedConditions(before, after []metav1.Condition) []metav1.Condition {
	var out []metav1.Condition
	for _, a := range after {
		b := meta.FindStatusCondition(before, a.Type)
		if b == nil || b.Status != a.Status || b.Reason != a.Reason {
			out = append(out, a)
		}
	}
	return out
}

// patchStatus records an Event for every condition that changed since
// before (recordConditionEvents), and patches obj's status when it
// changed. A gone object is not an error.
func patchStatus[T statusObject](ctx context.Context, c client.Client, rec events.EventRecorder, obj, before T) error {
	if equality.Semantic.DeepEqual(obj, before) {
		// Most reconciles change nothing: comparing costs far less than
		// computing the patch that says so.
		return nil
	}
	recordConditionEvents(rec, obj, changedConditions(before.GetConditions(), obj.GetConditions()), obj.GetConditions())
	patch := client.MergeFrom(before)
	data, err := patch.Data(obj)
	if err != nil {
		return fmt.Errorf("status patch: %w", err)
	}
	if string(data) == "{}" {
		return nil
	}
	if err := c.Status().Patch(ctx, obj, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patch status: %w", err)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// controlledBy reports whether obj's controller is owner (by UID).
func controlledBy(obj, owner metav1.Object) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == owner.GetUID()
}

// inForceCondition is the InForce condition of an object of kind and name
// at generation gen that Tenant t compiles into its configuration; for a
// Connection, rotatedAt is its credentials' rotation time, which must be
// the one compiled. refs is the object's reference check: an object whose
// references do not resolve is not in force, for that reason.
func inForceCondition(refs refsObservation, t *v1alpha1.Tenant, kind, name string, gen int64, rotatedAt *metav1.Time) metav1.Condition {
	if refs.reason != "" {
		return cond(v1alpha1.ConditionInForce, metav1.ConditionFalse, refs.reason, "%s", refs.message)
	}
	compiled := false
	for _, o := range t.Status.Compiled {
		if o.Kind == kind && o.Name == name {
			compiled = o.Generation == gen && sameTime(o.CredentialsRotatedAt, rotatedAt)
			break
		}
	}
	if !compiled {
		if c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionConfigurationValid); c != nil && c.Status == metav1.ConditionFalse {
			return cond(v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonTenantConfigurationInvalid,
				"generation %d is not in force: Tenant %s's configuration does not compile: %s", gen, t.Name, c.Message)
		}
		return cond(v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonNotCompiled,
			"generation %d is not yet compiled into Tenant %s's configuration", gen, t.Name)
	}
	if t.Status.LoadedConfigHash != t.Status.ConfigHash {
		why := "its bus pods do not serve it yet"
		if c := meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			why += ": " + c.Message
		}
		return cond(v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonTenantNotServing,
			"generation %d is compiled into configuration %d of Tenant %s, but %s", gen, t.Status.ConfigGeneration, t.Name, why)
	}
	return cond(v1alpha1.ConditionInForce, metav1.ConditionTrue, v1alpha1.ReasonConfigurationLoaded,
		"generation %d is in force: configuration %d of Tenant %s, served by its bus pods", gen, t.Status.ConfigGeneration, t.Name)
}

// sameTime reports whether a and b are both unset or the same instant.
func sameTime(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(b)
}

// specChanged passes creations, deletions and updates that change an
// object's generation (its spec) or start its deletion: an object's own
// status writes do not reconcile the objects that watch it.
var specChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			!e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp())
	},
}

// tenantInForceChanged passes the Tenant events that can change whether
// its dependents are in force: spec or deletion changes, and changes of
// the configuration compiled or loaded, of ConfigurationValid, or of Ready.
var tenantInForceChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if specChanged.Update(e) {
			return true
		}
		old, cur := e.ObjectOld.(*v1alpha1.Tenant), e.ObjectNew.(*v1alpha1.Tenant)
		return old.Status.ConfigHash != cur.Status.ConfigHash ||
			old.Status.LoadedConfigHash != cur.Status.LoadedConfigHash ||
			!equality.Semantic.DeepEqual(old.Status.Compiled, cur.Status.Compiled) ||
			conditionChanged(old.Status.Conditions, cur.Status.Conditions, v1alpha1.ConditionConfigurationValid) ||
			conditionChanged(old.Status.Conditions, cur.Status.Conditions, v1alpha1.ConditionReady)
	},
}

// conditionChanged reports whether condition typ differs between a and b.
func conditionChanged(a, b []metav1.Condition, typ string) bool {
	x, y := meta.FindStatusCondition(a, typ), meta.FindStatusCondition(b, typ)
	if x == nil || y == nil {
		return x != y
	}
	return x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message
}
