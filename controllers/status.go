package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
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

// nameConflictCondition is condition typ False for conflict, a name taken
// by an object the operator did not make.
func nameConflictCondition(typ string, conflict error) metav1.Condition {
	return cond(typ, metav1.ConditionFalse, v1alpha1.ReasonNameConflict,
		"%v; rename or delete it: the operator never adopts an object it did not make", conflict)
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

// patchStatus records the Events of the change since before
// (recordConditionEvents), and patches obj's status when it changed. A
// status that shows only progress is not written until it has lasted
// progressGrace (progress.wait): patchStatus returns when to try again,
// 0 when the watches bring what comes next. tenant is
// the Tenant obj depends on (nil when none or not found): while it has not
// compiled its first configuration, the grace does not start
// (progressHeld). A gone object is not an error.
func patchStatus[T statusObject](ctx context.Context, c client.Client, rec events.EventRecorder, obj, before T, tenant *v1alpha1.Tenant) (time.Duration, error) {
	// The watches bring the next step of one on its way (its Tenant's
	// compile and load, its Secrets): only a step held back below is
	// looked at again at a time of its own. Looking again every
	// progressGrace as well was most of the Connections' and Grants'
	// reconciles while hundreds of Tenants came up, and found nothing the
	// watches had not brought.
	now, was := statusField(obj), statusField(before)
	if equality.Semantic.DeepEqual(now, was) {
		// Most reconciles change nothing: comparing costs far less than
		// computing the patch that says so.
		return 0, nil
	}
	if wait := progress.wait(obj, before, tenant, time.Now()); wait > 0 {
		return wait, nil
	}
	// Only the status is written (the status subresource ignores the
	// rest), so only the status is encoded: at hundreds of Tenants,
	// encoding whole objects three times over to compare, hash and diff
	// them was a twentieth of the operator's CPU.
	nowJSON, err := json.Marshal(map[string]any{"status": now})
	if err != nil {
		return 0, fmt.Errorf("status: %w", err)
	}
	wasJSON, err := json.Marshal(map[string]any{"status": was})
	if err != nil {
		return 0, fmt.Errorf("status: %w", err)
	}
	var whole map[string]any
	if err := json.Unmarshal(nowJSON, &whole); err != nil {
		return 0, fmt.Errorf("status: %w", err)
	}
	st, _ := whole["status"].(map[string]any)
	hash, err := statusHash(st)
	if err != nil {
		return 0, fmt.Errorf("status: %w", err)
	}
	key := writtenKey{kind: fmt.Sprintf("%T", obj), namespace: obj.GetNamespace(), name: obj.GetName(), part: "status"}
	if written.holds(key, hash, before.GetResourceVersion()) {
		// This status is written already; the cache shows an older one.
		return 0, nil
	}
	data, err := jsonpatch.CreateMergePatch(wasJSON, nowJSON)
	if err != nil {
		return 0, fmt.Errorf("status patch: %w", err)
	}
	if string(data) == "{}" {
		return 0, nil
	}
	recordConditionEvents(rec, obj, before.GetConditions(), obj.GetConditions())
	// The patch is sent as the object's metadata, so the API server
	// answers with its metadata alone (in protobuf): the operator reads
	// only the new resourceVersion of the answer, and decoding the whole
	// object back was a thirtieth of its CPU at hundreds of Tenants.
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return 0, fmt.Errorf("status: %w", err)
	}
	target := metadataTarget(gvk, obj.GetNamespace(), obj.GetName())
	patch := client.RawPatch(types.MergePatchType, data)
	switch err := c.Status().Patch(ctx, target, patch); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return 0, fmt.Errorf("patch status: %w", err)
	default:
		obj.SetResourceVersion(target.GetResourceVersion())
		written.wrote(key, hash, target.GetResourceVersion())
	}
	return 0, nil
}

// statusField is obj's Status field: every kind of api/v1alpha1 that
// patchStatus writes has one (TestStatusObjectsHaveAStatus).
func statusField(obj any) any {
	return reflect.ValueOf(obj).Elem().FieldByName("Status").Interface()
}

// progressGrace is how long a Connection, Grant or OwnershipPolicy that
// is only on its way to Ready (its Tenant has not compiled or loaded it
// yet) waits before that is written to its status. Most get there sooner,
// and then their status is written once, Ready, instead of once per step:
// at hundreds of Tenants the steps were a third of the operator's writes.
// Until then the status says what it said (nothing, for a new object), at
// an older observedGeneration.
const progressGrace = 10 * time.Second

// progress remembers since when each object's status has shown only
// progress.
var progress = &progressMemo{since: map[types.UID]progressSeen{}}

// progressMemo is the memory behind progress.
type progressMemo struct {
	mu    sync.Mutex
	since map[types.UID]progressSeen
}

// progressSeen is when an object's generation was first seen on its way.
type progressSeen struct {
	generation int64
	at         time.Time
}

// wait returns how much longer obj's status should wait before it is
// written, 0 to write it now: obj's status shows progress only (its Ready
// is not True for a reason of progress, no condition fails) and so did
// before's, for less than progressGrace at obj's generation, counted from
// the last time its Tenant t's ConfigurationValid changed (t's first
// compile, or a configuration that compiles again) if that is later;
// while t is held (progressHeld), until it no longer is.
func (m *progressMemo) wait(obj, before v1alpha1.ConditionedObject, t *v1alpha1.Tenant, now time.Time) time.Duration {
	if !defersProgress(obj) {
		return 0
	}
	uid := obj.(client.Object).GetUID()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !onlyProgress(obj.GetConditions()) || !onlyProgress(before.GetConditions()) {
		delete(m.since, uid)
		return 0
	}
	since := m.firstSeenLocked(uid, obj.(client.Object).GetGeneration(), now)
	if held := progressHeld(t, now); held > 0 {
		return held
	}
	if c := tenantCompiled(t); c != nil && c.LastTransitionTime.After(since) {
		since = c.LastTransitionTime.Time
	}
	return max(0, progressGrace-now.Sub(since))
}

// firstSeenLocked returns when uid was first seen on its way at
// generation gen, remembering now if it was not; m.mu is held.
func (m *progressMemo) firstSeenLocked(uid types.UID, gen int64, now time.Time) time.Time {
	seen, ok := m.since[uid]
	if !ok || seen.generation != gen {
		if len(m.since) >= eventMemoObjects {
			m.since = map[types.UID]progressSeen{}
		}
		seen = progressSeen{generation: gen, at: now}
		m.since[uid] = seen
	}
	return seen.at
}

// forget drops what m remembers of uid.
func (m *progressMemo) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.since, uid)
}

// readinessGrace is how long a Tenant's readiness that shows only
// progress waits before it is written, after the operator first saw it
// so or last wrote such a step. A pooled Tenant's replicas take its first
// document up within a second or so of its compile, and its first
// readiness is then written once, Ready, instead of
// ConfigurationNotLoaded and then Ready; a bus of its own goes through
// its replicas starting, ready and loading, each step a write of the
// Tenant's status and a reconcile of each of its Connections and Grants,
// whose InForce quotes it. A Tenant users watch shows such a step at most
// this late.
const readinessGrace = 3 * time.Second

// readinessProgress remembers, for each Tenant whose readiness shows only
// progress, since when it has waited.
var readinessProgress = &progressMemo{since: map[types.UID]progressSeen{}}

// readinessHeld returns how much longer Tenant t's readiness waits before
// it is written, 0 to write it now: t's readiness shows only progress
// (onlyProgress: replicas not ready, a configuration not loaded yet, and
// nothing fails), and so did before's (t as read; none at all for a new
// Tenant), and less than readinessGrace has passed since this was first
// seen or last let through. Ready reached or lost, a failure and a
// deletion are written at once; a readiness that did not change is not
// held (it writes nothing).
func readinessHeld(t, before *v1alpha1.Tenant, now time.Time) time.Duration {
	if !t.DeletionTimestamp.IsZero() || !onlyProgress(readinessStatus.conditions(t.Status.Conditions)) ||
		!onlyProgress(readinessStatus.conditions(before.Status.Conditions)) {
		readinessProgress.forget(t.UID)
		return 0
	}
	if _, same, err := readinessStatus.compare(t, before); err != nil || same {
		return 0
	}
	m := readinessProgress
	m.mu.Lock()
	defer m.mu.Unlock()
	since := m.firstSeenLocked(t.UID, t.Generation, now)
	if wait := readinessGrace - now.Sub(since); wait > 0 {
		return wait
	}
	// Let through: the next step waits its own grace.
	m.since[t.UID] = progressSeen{generation: t.Generation, at: now}
	return 0
}

// progressHeld returns how much longer the progress of Tenant t's
// dependents is held back, 0 when it is not: t has compiled no
// configuration yet and was created less than credentialsWait ago. Its
// compile waits that long for new Connections' credentials; in a burst
// of new Tenants the Connection credentials controller's queue makes that tens of
// seconds, and each Grant reported NotCompiled, then Ready, where the
// Tenant's own conditions already say what it waits for. A Tenant
// created alone compiles within a second, and its dependents' progress
// is written progressGrace after that, as before.
func progressHeld(t *v1alpha1.Tenant, now time.Time) time.Duration {
	if t == nil || t.Status.ConfigHash != "" || !t.DeletionTimestamp.IsZero() {
		return 0
	}
	if c := tenantCompiled(t); c != nil && c.Status == metav1.ConditionFalse {
		return 0 // a configuration that does not compile is a failure to report
	}
	return max(0, credentialsWait-now.Sub(t.CreationTimestamp.Time))
}

// tenantCompiled is Tenant t's ConfigurationValid condition, nil when t is
// nil or has none.
func tenantCompiled(t *v1alpha1.Tenant) *metav1.Condition {
	if t == nil {
		return nil
	}
	return meta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionConfigurationValid)
}

// defersProgress reports whether obj is of a kind whose progress waits
// progressGrace: the many objects a Tenant compiles, not the Tenants and
// pools users watch.
func defersProgress(obj any) bool {
	switch obj.(type) {
	case *v1alpha1.Connection, *v1alpha1.Grant, *v1alpha1.OwnershipPolicy:
		return true
	}
	return false
}

// onlyProgress reports whether conditions say that something is on its
// way and nothing fails: Ready, if set, is not True for a reason of
// progress. No conditions at all (a new object) is progress too.
func onlyProgress(conditions []metav1.Condition) bool {
	for i := range conditions {
		if isFailure(&conditions[i]) {
			return false
		}
	}
	ready := meta.FindStatusCondition(conditions, v1alpha1.ConditionReady)
	return ready == nil || (ready.Status != metav1.ConditionTrue && progressReasons[ready.Reason])
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
		"generation %d is in force: Tenant %s's bus pods serve it", gen, t.Name)
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
