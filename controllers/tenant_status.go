package controllers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/storybus/storybus/api/v1alpha1"
)

// A Tenant's status is written by its three controllers, each owning a
// part of it by server-side apply under a field manager of its own: the
// parts never overwrite each other, and none needs the others' writes to
// be seen first. A controller writes its part only when it changed.
//
// Available is the readiness controller's, except while the workload
// controller finds the bus's name taken (NameConflict) or its workspace
// held by another Tenant (WorkspaceConflict): the condition is then the
// workload controller's until the conflict is gone, and the readiness
// controller leaves it as it is.

// tenantStatusPart is the part of a Tenant's status one controller owns.
type tenantStatusPart struct {
	// manager is the field manager of the part's writes.
	manager string
	// owns reports whether a condition is the part's.
	owns func(metav1.Condition) bool
	// fields are the status fields of the part, by their JSON names.
	fields []string
	// yieldsTo is a manager whose fields the part never takes by force:
	// a write that would is refused (errYielded), and the next reconcile
	// reads what that manager wrote. Fields of any other manager (those
	// an older operator wrote) are taken over.
	yieldsTo string
}

// errYielded is a status write refused because another controller owns a
// field it would change: that controller's write is on its way to the
// cache, and the reconcile is to be repeated with it.
var errYielded = errors.New("status part owned by another controller")

var (
	configurationStatus = tenantStatusPart{
		manager: FieldManager + "-configuration",
		owns:    ofTypes(v1alpha1.ConditionConfigurationValid),
		fields:  []string{"configHash", "configGeneration", "connections", "compiled"},
	}
	workloadStatus = tenantStatusPart{
		manager: FieldManager + "-workload",
		owns: func(c metav1.Condition) bool {
			return ofTypes(v1alpha1.ConditionCertificateReady, v1alpha1.ConditionVolumeExpansion, v1alpha1.ConditionExposed, v1alpha1.ConditionMonitored)(c) ||
				c.Type == v1alpha1.ConditionAvailable && isConflict(c)
		},
		fields: []string{"externalEndpoint"},
	}
	readinessStatus = tenantStatusPart{
		manager: FieldManager + "-readiness",
		owns: func(c metav1.Condition) bool {
			return ofTypes(v1alpha1.ConditionConfigurationLoaded, v1alpha1.ConditionReady)(c) ||
				c.Type == v1alpha1.ConditionAvailable && !isConflict(c)
		},
		fields:   []string{"observedGeneration", "workspaceID", "endpoint", "replicas", "readyReplicas", "loadedConfigHash"},
		yieldsTo: FieldManager + "-workload",
	}
)

// ofTypes owns the conditions of the types given.
func ofTypes(types ...string) func(metav1.Condition) bool {
	return func(c metav1.Condition) bool { return slices.Contains(types, c.Type) }
}

// isConflict reports whether c is an Available condition the workload
// controller decides: a name or workspace in the way.
func isConflict(c metav1.Condition) bool {
	return c.Reason == v1alpha1.ReasonNameConflict || c.Reason == v1alpha1.ReasonWorkspaceConflict
}

// conditions returns the conditions of cs the part owns.
func (p tenantStatusPart) conditions(cs []metav1.Condition) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range cs {
		if p.owns(c) {
			out = append(out, c)
		}
	}
	return out
}

// values returns the part's fields of st, by JSON name; a zero one is
// absent, as the API omits it.
func (p tenantStatusPart) values(st *v1alpha1.TenantStatus) (map[string]any, error) {
	// The conditions are compared apart, and the objects compiled (a
	// Tenant's longest field) are only the configuration's: encoding
	// them for every part was a twentieth of the operator's CPU.
	part := *st
	part.Conditions = nil
	if !slices.Contains(p.fields, "compiled") {
		part.Compiled = nil
	}
	all, err := toJSONMap(&part)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, f := range p.fields {
		if v, ok := all[f]; ok && !isZero(v) {
			out[f] = v
		}
	}
	return out, nil
}

// compare returns the part's fields of t's status, and whether the part
// is the same in before (t as read).
func (p tenantStatusPart) compare(t, before *v1alpha1.Tenant) (map[string]any, bool, error) {
	sameConditions := equality.Semantic.DeepEqual(p.conditions(t.Status.Conditions), p.conditions(before.Status.Conditions))
	if sameConditions && sameBesidesConditions(&t.Status, &before.Status) {
		// Most reconciles change nothing: comparing the two statuses
		// costs far less than encoding both (the fields are nil then, as
		// nothing is written).
		return nil, true, nil
	}
	fields, err := p.values(&t.Status)
	if err != nil {
		return nil, false, fmt.Errorf("status: %w", err)
	}
	wasFields, err := p.values(&before.Status)
	if err != nil {
		return nil, false, fmt.Errorf("status: %w", err)
	}
	return fields, sameConditions && reflect.DeepEqual(fields, wasFields), nil
}

// sameBesidesConditions reports whether a and b are equal but for their
// conditions (each part compares its own).
func sameBesidesConditions(a, b *v1alpha1.TenantStatus) bool {
	x, y := *a, *b
	x.Conditions, y.Conditions = nil, nil
	return equality.Semantic.DeepEqual(x, y)
}

// write applies the part of t's status that differs from before (t as
// read), and records the Events of its conditions' change
// (recordConditionEvents). It writes nothing when the part is as it was. A gone
// Tenant is not an error.
func (p tenantStatusPart) write(ctx context.Context, c client.Client, rec events.EventRecorder, t, before *v1alpha1.Tenant) error {
	now, was := p.conditions(t.Status.Conditions), p.conditions(before.Status.Conditions)
	fields, same, err := p.compare(t, before)
	if err != nil || same {
		return err
	}
	conds := make([]any, 0, len(now))
	for _, cd := range now {
		m, err := toJSONMap(cd)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		conds = append(conds, m)
	}
	fields["conditions"] = conds
	key := writtenKey{kind: "Tenant", namespace: t.Namespace, name: t.Name, part: p.manager}
	hash, err := statusHash(fields)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if written.holds(key, hash, before.ResourceVersion) {
		return nil
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": fields}}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Tenant"))
	u.SetNamespace(t.Namespace)
	u.SetName(t.Name)
	var rv string
	if p.yieldsTo != "" {
		rv, err = applyStatusForMetadata(ctx, c, u, client.FieldOwner(p.manager))
		if conflictsWith(err, p.yieldsTo) {
			return errYielded
		}
	}
	if p.yieldsTo == "" || apierrors.IsConflict(err) {
		rv, err = applyStatusForMetadata(ctx, c, u, client.FieldOwner(p.manager), client.ForceOwnership)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("apply status: %w", err)
	}
	written.wrote(key, hash, rv)
	recordConditionEvents(rec, t, was, now)
	return nil
}

// conflictsWith reports whether err is an apply conflict with manager.
func conflictsWith(err error, manager string) bool {
	if !apierrors.IsConflict(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if strings.Contains(c.Message, strconv.Quote(manager)) {
			return true
		}
	}
	return false
}

// recordConditionEvents records the Events of a status change from before
// to after: a condition that fails (it is not True, for a reason that is
// not one of progress) as a Warning, a condition that stops failing as
// Normal, and a Tenant's Ready reached or lost. Progress itself (a condition appearing, a
// wait for the next step, a step done) is in the status and records
// nothing: at hundreds of Tenants an Event per step was most of the
// operator's writes. Ready repeats the reason of the condition that
// decides it and has an Event of its own only on a Tenant. A change
// already recorded is not recorded again: a reconcile that read the
// object from a cache not yet showing the write before it sees the same
// change.
func recordConditionEvents(rec events.EventRecorder, obj client.Object, before, after []metav1.Condition) {
	_, tenant := obj.(*v1alpha1.Tenant)
	evented := map[string]bool{}
	for _, ch := range changedConditions(before, after) {
		prev := meta.FindStatusCondition(before, ch.Type)
		failing, wasFailing := isFailure(&ch), prev != nil && isFailure(prev)
		switch {
		case ch.Type == v1alpha1.ConditionReady:
			// A Tenant's Ready: when it is reached, and when it is lost.
			if !tenant || (ch.Status != metav1.ConditionTrue && (prev == nil || prev.Status != metav1.ConditionTrue)) {
				continue
			}
		case !failing && !wasFailing:
			continue
		}
		if evented[ch.Reason] || !recorded.first(obj.GetUID(), ch) {
			continue
		}
		evented[ch.Reason] = true
		typ := corev1.EventTypeNormal
		if ch.Status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		rec.Eventf(obj, nil, typ, ch.Reason, "Reconcile", "%s=%s: %s", ch.Type, ch.Status, ch.Message)
	}
}

// progressReasons are the reasons of a condition that is not True only
// because a step has not happened yet: waiting is not failing.
var progressReasons = map[string]bool{
	v1alpha1.ReasonReconciling:            true,
	v1alpha1.ReasonNotCompiled:            true,
	v1alpha1.ReasonTenantNotServing:       true,
	v1alpha1.ReasonAwaitingConfiguration:  true,
	v1alpha1.ReasonReplicasNotReady:       true,
	v1alpha1.ReasonConfigurationNotLoaded: true,
	v1alpha1.ReasonRoutePending:           true,
	v1alpha1.ReasonIngressPending:         true,
	v1alpha1.ReasonVolumeExpanding:        true,
	v1alpha1.ReasonCertificateNotReady:    true,
	v1alpha1.ReasonScaledToZero:           true,
	v1alpha1.ReasonAwaitingTenants:        true,
}

// isFailure reports whether c says something is wrong: it is not True,
// for a reason other than progress.
func isFailure(c *metav1.Condition) bool {
	return c.Status != metav1.ConditionTrue && !progressReasons[c.Reason]
}

// recorded remembers, by object and condition type, the status and reason
// last recorded as an Event.
var recorded = &eventMemo{last: map[types.UID]map[string]string{}}

// eventMemo is what recordConditionEvents recorded last.
type eventMemo struct {
	mu   sync.Mutex
	last map[types.UID]map[string]string
}

// eventMemoObjects bounds the objects remembered: past it the memo starts
// again (an Event may then be recorded twice, never lost).
const eventMemoObjects = 50_000

// first reports whether c's status and reason are not the last recorded
// for its type on the object uid, and remembers them.
func (m *eventMemo) first(uid types.UID, c metav1.Condition) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.last[uid]
	if seen == nil {
		if len(m.last) >= eventMemoObjects {
			m.last = map[types.UID]map[string]string{}
		}
		seen = map[string]string{}
		m.last[uid] = seen
	}
	now := string(c.Status) + "/" + c.Reason
	if seen[c.Type] == now {
		return false
	}
	seen[c.Type] = now
	return true
}

// setCondition sets c on t, stamped with t's generation, keeping the
// transition time of a condition whose status did not change.
func setCondition(t *v1alpha1.Tenant, c metav1.Condition) {
	c.ObservedGeneration = t.Generation
	meta.SetStatusCondition(&t.Status.Conditions, c)
}
