package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/storybus/storybus/api/v1alpha1"
)

// annotationCachedDigest is set on the cache's copy of an object whose
// spec the cache trims (a bus StatefulSet): the digest of the fields an
// apply sets (appliedFieldsDigest) as the API server had them. Only the
// cache's copy carries it: the operator applies what it computes, never
// a cached copy, and a patch computed from a cached copy leaves it out,
// since both sides have it.
const annotationCachedDigest = "bus.storybus.io/cached-digest"

// trimCachedStatefulSet drops from a StatefulSet about to be cached the
// part of its pod template the operator never reads, and records the
// digest of what it applies to it first. What is kept is what is read:
// the metadata, the replicas, the volume claim templates and their
// retention (a volume's size, what a deletion keeps), the containers'
// names and arguments (which NATS cluster a bus serves on) and the status.
// At 500 Tenants the pod templates were a tenth of the operator's heap.
// Whether the object still holds what was applied is decided by the
// digest: a change of status keeps it, and is not compared again; a
// change of what was applied (by anyone) makes a new one, and the object
// is read whole from the API server to compare it (objectWriter.apply).
//
// An informer may pass an object through its transform twice (a watch
// list's objects go through it into a temporary store, and again as that
// store replaces the cache's): a StatefulSet trimmed already is left as it
// is. No object already in the cache is transformed again, which is what
// lets the transform change it in place.
func trimCachedStatefulSet(sts *appsv1.StatefulSet) error {
	if trimmed(sts) {
		return nil
	}
	digest, err := appliedFieldsDigest(sts, sts.Spec)
	if err != nil {
		return err
	}
	ann := maps.Clone(sts.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[annotationCachedDigest] = digest
	sts.Annotations = ann
	var containers []corev1.Container
	for _, c := range sts.Spec.Template.Spec.Containers {
		containers = append(containers, corev1.Container{Name: c.Name, Args: c.Args})
	}
	sts.Spec.Template = corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: containers, RestartPolicy: restartPolicyTrimmed}}
	return nil
}

// restartPolicyTrimmed marks the pod template of a StatefulSet the cache
// trimmed: the API server takes no StatefulSet whose template's restart
// policy is not Always, so no object it has carries it.
const restartPolicyTrimmed corev1.RestartPolicy = "TrimmedByTheOperatorsCache"

// trimmed reports whether obj is a StatefulSet trimCachedStatefulSet
// trimmed: its digest set, and its template marked with
// restartPolicyTrimmed, which no StatefulSet the API server has carries.
// A digest annotation on anything else (set by a user on the API server's
// object) means nothing.
func trimmed(obj any) bool {
	sts, ok := obj.(*appsv1.StatefulSet)
	return ok && sts.Annotations[annotationCachedDigest] != "" && sts.Spec.Template.Spec.RestartPolicy == restartPolicyTrimmed
}

// appliedFieldsDigest is the digest of what an apply can set on o: its
// labels, annotations (but annotationCachedDigest), owner references and
// spec.
func appliedFieldsDigest(o client.Object, spec any) (string, error) {
	ann := o.GetAnnotations()
	if _, ok := ann[annotationCachedDigest]; ok {
		ann = maps.Clone(ann)
		delete(ann, annotationCachedDigest)
	}
	b, err := json.Marshal(struct {
		Labels      map[string]string
		Annotations map[string]string
		Owners      []metav1.OwnerReference
		Spec        any
	}{o.GetLabels(), ann, o.GetOwnerReferences(), spec})
	if err != nil {
		return "", fmt.Errorf("digest of %s: %w", o.GetName(), err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// comparedVersion is what verified remembers current by: the digest of
// what an apply sets, for a copy the cache trimmed (a change of status
// keeps it), else its resourceVersion.
func comparedVersion(current client.Object) string {
	if trimmed(current) {
		return current.GetAnnotations()[annotationCachedDigest]
	}
	return current.GetResourceVersion()
}

// whole returns current as the API server has it, and its comparedVersion:
// current itself, unless the cache trimmed it, when it is read from the
// API server. A trimmed object that is gone is nil.
func (w objectWriter) whole(ctx context.Context, current client.Object) (client.Object, string, error) {
	if !trimmed(current) {
		return current, current.GetResourceVersion(), nil
	}
	full := &appsv1.StatefulSet{}
	if err := w.APIReader.Get(ctx, client.ObjectKeyFromObject(current), full); err != nil {
		return nil, "", client.IgnoreNotFound(err)
	}
	digest, err := appliedFieldsDigest(full, full.Spec)
	return full, digest, err
}

// cachedStrings holds one copy of each string the cached custom resources
// repeat: their namespace, their conditions' types, statuses, reasons and
// messages (the ten Connections and ten Grants of a Tenant say the same
// of it), the kinds a Tenant's status lists, a Grant's Tenant. Decoding
// gives every object copies of its own.
var cachedStrings = &stringTable{strings: map[string]string{}}

// internedStrings bounds cachedStrings: past it the table starts again
// (the objects keep their strings; only later ones get new copies).
const internedStrings = 20_000

// stringTable is a bounded table of strings, safe for concurrent use.
type stringTable struct {
	mu      sync.Mutex
	strings map[string]string
}

// intern returns the table's copy of s, adding s if it has none.
func (t *stringTable) intern(s string) string {
	if s == "" {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.strings[s]; ok {
		return c
	}
	if len(t.strings) >= internedStrings {
		clear(t.strings)
	}
	t.strings[s] = s
	return s
}

// internCachedStrings replaces the strings of a custom resource about to
// be cached that others repeat with cachedStrings' copies.
func internCachedStrings(obj v1alpha1.ConditionedObject) {
	o := obj.(client.Object)
	o.SetNamespace(cachedStrings.intern(o.GetNamespace()))
	cs := obj.GetConditions()
	for i := range cs {
		c := &cs[i]
		c.Type = cachedStrings.intern(c.Type)
		c.Status = metav1.ConditionStatus(cachedStrings.intern(string(c.Status)))
		c.Reason = cachedStrings.intern(c.Reason)
		c.Message = cachedStrings.intern(c.Message)
	}
	switch x := obj.(type) {
	case *v1alpha1.Tenant:
		for i := range x.Status.Compiled {
			x.Status.Compiled[i].Kind = cachedStrings.intern(x.Status.Compiled[i].Kind)
		}
	case *v1alpha1.Grant:
		x.Status.Tenant = cachedStrings.intern(x.Status.Tenant)
	}
}
