package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
// before, one per reason (Ready repeats the reason of the condition that
// decides it, and says nothing more), and patches obj's status when it
// changed. A gone object is not an error.
func patchStatus[T statusObject](ctx context.Context, c client.Client, rec events.EventRecorder, obj, before T) error {
	changed := changedConditions(before.GetConditions(), obj.GetConditions())
	slices.SortStableFunc(changed, func(a, b metav1.Condition) int {
		return cmp.Compare(boolInt(a.Type == v1alpha1.ConditionReady), boolInt(b.Type == v1alpha1.ConditionReady))
	})
	evented := map[string]bool{}
	for _, ch := range changed {
		if evented[ch.Reason] {
			continue
		}
		evented[ch.Reason] = true
		typ := corev1.EventTypeNormal
		if ch.Status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		rec.Eventf(obj, nil, typ, ch.Reason, "Reconcile", "%s=%s: %s", ch.Type, ch.Status, ch.Message)
	}
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
