package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
)

// annotationApplied records, on every object the operator applies, the
// hash of what it applied: a reconcile whose desired object hashes the same
// and that finds every applied field still in place sends nothing.
const annotationApplied = "bus.storybus.io/applied"

// objectWriter writes the objects the operator makes for a Tenant, by
// server-side apply, only when they differ from what the cache holds. The
// configuration and workload controllers share it.
type objectWriter struct {
	client.Client
	// APIReader reads uncached: whether a name the cache does not hold
	// (it holds only the operator's labelled objects) is taken.
	APIReader client.Reader
}

// current reads the object named name of obj's kind for Tenant t into
// obj, and reports whether it exists. An object of that name the Tenant
// does not control is a conflict: the operator never adopts it. The cache
// holds only what the operator labels, so a name it lacks is read from the
// API server before the operator creates it.
func (w objectWriter) current(ctx context.Context, t *v1alpha1.Tenant, kind, name string, obj client.Object) (bool, error) {
	key := types.NamespacedName{Namespace: t.Namespace, Name: name}
	err := w.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = w.APIReader.Get(ctx, key, obj)
	}
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get %s %s: %w", kind, name, err)
	case !controlledBy(obj, t):
		return true, &nameConflictError{kind: kind, name: name, tenant: t.Name}
	}
	return true, nil
}

// nameConflictError is a name taken by an object the Tenant does not
// control: the user must rename one of them.
type nameConflictError struct{ kind, name, tenant string }

func (e *nameConflictError) Error() string {
	return fmt.Sprintf("%s %s exists and is not controlled by Tenant %s", e.kind, e.name, e.tenant)
}

// terminal wraps err as a reconcile.TerminalError: retrying cannot fix it,
// the user must.
func terminal(err error) error { return reconcile.TerminalError(err) }

// apply server-side applies desired as the operator's field manager,
// taking over fields someone else changed (that is how drift is
// repaired), unless current (the cached object, nil when there is none)
// already holds it: it reports whether it wrote.
//
// desired is converted to a map of its own first, to hash it and to
// compare it with current; it is sent as that map, and the server answers
// with the object's metadata alone (applyForMetadata).
func (w objectWriter) apply(ctx context.Context, current client.Object, desired runtime.ApplyConfiguration, what string) (bool, error) {
	want, err := toJSONMap(desired)
	if err != nil {
		return false, fmt.Errorf("apply %s: %w", what, err)
	}
	hash, err := jsonHash(want)
	if err != nil {
		return false, fmt.Errorf("apply %s: %w", what, err)
	}
	md, _ := want["metadata"].(map[string]any)
	if md == nil {
		return false, fmt.Errorf("apply %s: no metadata", what)
	}
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[annotationApplied] = hash
	kind, _ := want["kind"].(string)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	key := writtenKey{kind: kind, namespace: ns, name: name}
	if current != nil && written.same(key, hash, current.GetResourceVersion()) {
		// The cache shows this object's last write, and that write was
		// this: what it holds now holds it.
		verified.wrote(key, hash, comparedVersion(current))
		return false, nil
	}
	if current != nil && written.holds(key, hash, current.GetResourceVersion()) {
		// The cache does not show this object's last write yet, and that
		// write was this.
		return false, nil
	}
	if current != nil && current.GetAnnotations()[annotationApplied] == hash {
		if verified.same(key, hash, comparedVersion(current)) {
			// This version of the object was found to hold it already.
			return false, nil
		}
		whole, version, err := w.whole(ctx, current)
		if err != nil {
			return false, fmt.Errorf("apply %s: %w", what, err)
		}
		if whole != nil {
			have, err := toJSONMap(whole)
			if err != nil {
				return false, fmt.Errorf("apply %s: %w", what, err)
			}
			if holds(have, want) {
				verified.wrote(key, hash, version)
				return false, nil
			}
		}
	}
	rv, err := applyForMetadata(ctx, w.Client, &unstructured.Unstructured{Object: want}, client.FieldOwner(FieldManager), client.ForceOwnership)
	if err != nil {
		return false, fmt.Errorf("apply %s: %w", what, err)
	}
	written.wrote(key, hash, rv)
	return true, nil
}

// applyForMetadata server-side applies u (its apiVersion, kind, namespace
// and name set) with opts (its field manager, and whether it forces
// ownership), and returns the object's new resourceVersion. It is sent as
// the object's metadata, so the API server answers with the metadata
// alone, in protobuf: decoding the whole object back (JSON, for the
// Tenants and the unstructured applies) only to read its version was a
// fiftieth of the operator's CPU at hundreds of Tenants.
func applyForMetadata(ctx context.Context, c client.Client, u *unstructured.Unstructured, opts ...client.PatchOption) (string, error) {
	target, patch, err := metadataApply(u)
	if err != nil {
		return "", err
	}
	err = c.Patch(ctx, target, patch, opts...)
	return target.GetResourceVersion(), err
}

// applyStatusForMetadata is applyForMetadata for u's status subresource.
func applyStatusForMetadata(ctx context.Context, c client.Client, u *unstructured.Unstructured, opts ...client.SubResourcePatchOption) (string, error) {
	target, patch, err := metadataApply(u)
	if err != nil {
		return "", err
	}
	err = c.Status().Patch(ctx, target, patch, opts...)
	return target.GetResourceVersion(), err
}

// metadataApply is u as a server-side apply patch, and the metadata of u's
// object that the API server's answer is decoded into.
func metadataApply(u *unstructured.Unstructured) (*metav1.PartialObjectMetadata, client.Patch, error) {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, nil, err
	}
	return metadataTarget(u.GroupVersionKind(), u.GetNamespace(), u.GetName()), client.RawPatch(types.ApplyPatchType, data), nil
}

// metadataTarget is the metadata of the object of kind gvk named
// namespace/name, to send a patch through the metadata client: the API
// server answers it with the object's metadata alone.
func metadataTarget(gvk schema.GroupVersionKind, namespace, name string) *metav1.PartialObjectMetadata {
	target := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	target.SetGroupVersionKind(gvk)
	return target
}

// toJSONMap is v's JSON form as a map: numbers are float64, whatever Go
// type they came from, so two forms of one object compare equal.
func toJSONMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// jsonHash is the hex SHA-256 of m's JSON (encoding/json sorts map keys).
func jsonHash(m map[string]any) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// holds reports whether have holds every field of want with its value:
// maps may have more keys (defaults, other managers' fields), lists must
// have as many items, each holding want's. A zero value in want (false, 0,
// "", empty) is held by an absent field, as the API omits it; so are an
// apiVersion and kind, which typed objects (the volume claim templates of
// a StatefulSet, an object read back) do not carry.
func holds(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return have == nil && len(w) == 0
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok {
				if !isZero(wv) && k != "apiVersion" && k != "kind" {
					return false
				}
				continue
			}
			if !holds(hv, wv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok {
			return have == nil && len(w) == 0
		}
		if len(h) != len(w) {
			return false
		}
		for i := range w {
			if !holds(h[i], w[i]) {
				return false
			}
		}
		return true
	case nil:
		return true
	}
	if have == nil {
		return isZero(want)
	}
	return reflect.DeepEqual(have, want)
}

// isZero reports whether a JSON value is its type's zero.
func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case float64:
		return x == 0
	case string:
		return x == ""
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}
