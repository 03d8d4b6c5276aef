package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/storybus/storybus/api/v1alpha1"
)

// serverReader is an APIReader that answers every Get with a copy of
// the API server's object, and counts the reads.
type serverReader struct {
	object *appsv1.StatefulSet
	reads  int
}

func (r *serverReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.reads++
	r.object.DeepCopyInto(obj.(*appsv1.StatefulSet))
	return nil
}

func (r *serverReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("no list")
}

// TestTrimmedStatefulSetComparedByDigest: a StatefulSet the cache
// trimmed is read whole once to find that it holds what was applied; a
// new version whose change is its status alone keeps the digest and is
// neither read nor written; one whose template changed, in a part the
// cache drops, is read and applied again.
func TestTrimmedStatefulSetComparedByDigest(t *testing.T) {
	ctx := context.Background()
	// The operator's memory of what it wrote and verified is its
	// process's: a namespace of this run's own starts it empty.
	tn := newTenant(fmt.Sprintf("digest-unit-%d", time.Now().UnixNano()), "desk", func(t *v1alpha1.Tenant) { t.UID = "desk-uid" })
	desired := desiredStatefulSet(tn, Options{}.withDefaults())
	want, err := toJSONMap(desired)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := jsonHash(want)
	if err != nil {
		t.Fatal(err)
	}
	// The API server's object: what was applied, with its hash.
	server := &appsv1.StatefulSet{}
	b, err := json.Marshal(desired)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, server); err != nil {
		t.Fatal(err)
	}
	server.Annotations = map[string]string{annotationApplied: hash}
	server.ResourceVersion = "10"
	cached := func() *appsv1.StatefulSet {
		c := server.DeepCopy()
		if err := trimCachedStatefulSet(c); err != nil {
			t.Fatal(err)
		}
		return c
	}

	patches := 0
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			patches++
			return nil
		},
	}).Build()
	reader := &serverReader{object: server}
	w := objectWriter{Client: c, APIReader: reader}
	step := func(name string, wantReads, wantPatches int) {
		t.Helper()
		before := patches
		wrote, err := w.apply(ctx, cached(), desired, "statefulset")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if reader.reads != wantReads || patches != wantPatches || wrote != (patches > before) {
			t.Fatalf("%s: %d reads, %d patches (wrote %v), want %d and %d", name, reader.reads, patches, wrote, wantReads, wantPatches)
		}
	}

	// The informer may transform a cached object again: the digest stays
	// the whole object's. One the API server has with a digest of its own
	// (images in its template) is digested afresh.
	again := cached()
	digest := again.Annotations[annotationCachedDigest]
	if _, err := stripCachedMetadata(again); err != nil || again.Annotations[annotationCachedDigest] != digest || !trimmed(again) {
		t.Fatalf("transformed again: digest %q (%v), trimmed %v; want %q", again.Annotations[annotationCachedDigest], err, trimmed(again), digest)
	}
	forged := server.DeepCopy()
	forged.Annotations[annotationCachedDigest] = "forged"
	if err := trimCachedStatefulSet(forged); err != nil || forged.Annotations[annotationCachedDigest] != digest {
		t.Fatalf("a forged digest kept: %q (%v), want %q", forged.Annotations[annotationCachedDigest], err, digest)
	}

	step("first look", 1, 0)
	step("the same version again", 1, 0)

	server.Status = appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: 1, CurrentRevision: "r2"}
	server.ResourceVersion = "11"
	step("a new status", 1, 0)

	server.Spec.Template.Spec.Containers[0].Image = "evil.example/miner:latest"
	server.ResourceVersion = "12"
	step("an image changed", 2, 1)
}

// TestCachedCustomResourcesShareRepeatedStrings: two Connections decoded
// apart hold one copy of their namespace and of their conditions' strings
// once cached, and the table of strings stays bounded.
func TestCachedCustomResourcesShareRepeatedStrings(t *testing.T) {
	decode := func(name string) *v1alpha1.Connection {
		t.Helper()
		doc := `{"metadata":{"namespace":"newsroom","name":"` + name + `"},"status":{"conditions":[` +
			`{"type":"InForce","status":"True","reason":"ConfigurationLoaded","message":"generation 1 is in force: Tenant desk's bus pods serve it","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`
		c := &v1alpha1.Connection{}
		if err := json.Unmarshal([]byte(doc), c); err != nil {
			t.Fatal(err)
		}
		if _, err := stripCachedMetadata(c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := decode("wire"), decode("agency")
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	ca, cb := a.Status.Conditions[0], b.Status.Conditions[0]
	if !same(a.Namespace, b.Namespace) || !same(ca.Type, cb.Type) || !same(string(ca.Status), string(cb.Status)) ||
		!same(ca.Reason, cb.Reason) || !same(ca.Message, cb.Message) {
		t.Error("two cached Connections hold copies of their own of the strings they share")
	}
	if a.Name == b.Name || ca.Message != "generation 1 is in force: Tenant desk's bus pods serve it" {
		t.Errorf("interning changed a value: names %q, %q; message %q", a.Name, b.Name, ca.Message)
	}

	table := &stringTable{strings: map[string]string{}}
	for i := range internedStrings + 10 {
		table.intern(fmt.Sprint(i))
	}
	if n := len(table.strings); n > internedStrings {
		t.Errorf("the table holds %d strings, past its bound of %d", n, internedStrings)
	}
}

// TestAForgedDigestMeansNothing: a digest annotation a user sets on an
// object is dropped before it is cached, and on an object read past the
// cache (not trimmed) it is not what the object is compared by: the
// object is compared whole, by its resourceVersion.
func TestAForgedDigestMeansNothing(t *testing.T) {
	forged := map[string]string{annotationCachedDigest: "forged", "kept": "yes"}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "desk-bus-config", ResourceVersion: "7", Annotations: forged}}
	cached := *cm // shares cm's map of annotations
	if _, err := stripCachedMetadata(&cached); err != nil {
		t.Fatal(err)
	}
	if _, ok := cached.Annotations[annotationCachedDigest]; ok || cached.Annotations["kept"] != "yes" {
		t.Errorf("cached ConfigMap's annotations: %v", cached.Annotations)
	}
	if cm.Annotations[annotationCachedDigest] != "forged" {
		t.Error("the transform changed the map it was given rather than a copy")
	}

	reader := &serverReader{object: &appsv1.StatefulSet{}}
	w := objectWriter{APIReader: reader}
	// A StatefulSet's image is optional: one without, and with a digest,
	// is still not one the cache trimmed.
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "desk-bus", ResourceVersion: "9", Annotations: forged}}
	sts.Spec.Template.Spec.Containers = []corev1.Container{{Name: "bus"}}
	for _, obj := range []client.Object{cm, sts} {
		if v := comparedVersion(obj); v != obj.GetResourceVersion() {
			t.Errorf("%T compared by %q, want its resourceVersion", obj, v)
		}
		whole, v, err := w.whole(context.Background(), obj)
		if err != nil || whole != obj || v != obj.GetResourceVersion() {
			t.Errorf("%T read whole: %v, %q, %v; want itself at its resourceVersion", obj, whole == obj, v, err)
		}
	}
	if reader.reads != 0 {
		t.Errorf("%d reads past the cache for objects it does not trim", reader.reads)
	}
}
