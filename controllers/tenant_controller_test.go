package controllers

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
)

// TestTenantCreate proves a new Tenant gets its finalizer, signing key,
// compiled configuration, Services, StatefulSet and PodDisruptionBudget,
// all controlled by it (so garbage collection removes them with it), and a
// status that is not Ready until the StatefulSet reports every replica
// ready.
func TestTenantCreate(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom"))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
	waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady)
	if err := hasCondition(tn, tn.Status.ObservedGeneration, v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady); err != nil {
		t.Error(err)
	}
	if !slices.Contains(tn.Finalizers, v1alpha1.Finalizer) {
		t.Errorf("finalizers %v", tn.Finalizers)
	}
	if want := "http://newsroom-bus." + ns + ".svc.cluster.local:8080"; tn.Status.Endpoint != want {
		t.Errorf("endpoint %q, want %q", tn.Status.Endpoint, want)
	}
	if tn.Status.WorkspaceID != "newsroom" || tn.Status.Replicas != 1 || tn.Status.ReadyReplicas != 0 {
		t.Errorf("status %+v", tn.Status)
	}
	// Server-side defaults.
	if tn.Spec.Storage == nil || tn.Spec.Storage.Embedded == nil || tn.Spec.Storage.Embedded.Size.String() != "10Gi" ||
		tn.Spec.Storage.Embedded.Sync != "always" || tn.Spec.DeletionPolicy != v1alpha1.DeletionPolicyRetain ||
		*tn.Spec.Replicas != 1 || tn.Spec.IdempotencyWindow.Duration != 168*time.Hour {
		t.Errorf("defaults: %+v", tn.Spec)
	}

	key := &corev1.Secret{}
	mustGet(t, ns, "newsroom-bus-signing-key", key)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).Match(key.Data[SigningKeyKey]) {
		t.Errorf("signing key %q", key.Data[SigningKeyKey])
	}

	w, cm, err := workspaceOf(ns, "newsroom")
	if err != nil {
		t.Fatal(err)
	}
	if w.ID != "newsroom" || w.SigningKeyFile != "/etc/storybus/config/signingKey" || w.SigningKey != "" {
		t.Errorf("workspace %+v", w)
	}
	if h := cm.Annotations[v1alpha1.AnnotationConfigHash]; h == "" || h != tn.Status.ConfigHash || h != w.Hash || h != ConfigHash([]byte(strings.TrimSuffix(cm.Data[ConfigFile], "configHash: "+h+"\n"))) {
		t.Errorf("config hash: annotation %q, status %q", h, tn.Status.ConfigHash)
	}

	http, ops := &corev1.Service{}, &corev1.Service{}
	mustGet(t, ns, "newsroom-bus", http)
	mustGet(t, ns, "newsroom-bus-ops", ops)
	if p := http.Spec.Ports; len(p) != 1 || p[0].Port != 8080 || p[0].Name != "http" {
		t.Errorf("http service ports %+v", p)
	}
	if p := ops.Spec.Ports; len(p) != 1 || p[0].Port != 8081 || ops.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("ops service %+v", ops.Spec)
	}

	sts := &appsv1.StatefulSet{}
	mustGet(t, ns, "newsroom-bus", sts)
	pod := sts.Spec.Template
	c := pod.Spec.Containers[0]
	args := strings.Join(append(c.Command, c.Args...), " ")
	for _, want := range []string{"storybus serve", "--config /etc/storybus/config/workspace.yaml", "--data-dir /var/lib/storybus", "--sync always", "--listen :8080", "--ops-listen :8081"} {
		if !strings.Contains(args, want) {
			t.Errorf("command %q lacks %q", args, want)
		}
	}
	if c.Image != testBusImage || sts.Spec.ServiceName != "newsroom-bus-ops" || *sts.Spec.Replicas != 1 {
		t.Errorf("statefulset: image %s, service %s, replicas %d", c.Image, sts.Spec.ServiceName, *sts.Spec.Replicas)
	}
	if len(pod.Annotations) != 0 {
		t.Errorf("the pod template carries annotations %v: a configuration change would restart pods", pod.Annotations)
	}
	if v := sts.Spec.VolumeClaimTemplates; len(v) != 1 || v[0].Spec.Resources.Requests.Storage().String() != "10Gi" {
		t.Errorf("volume claims %+v", v)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v", p)
	}

	pdb := &policyv1.PodDisruptionBudget{}
	mustGet(t, ns, "newsroom-bus", pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("pdb %+v", pdb.Spec)
	}

	for _, obj := range []client.Object{key, cm, http, ops, sts, pdb} {
		if err := isController(obj, tn); err != nil {
			t.Error(err)
		}
	}

	serveTenant(t, ns, "newsroom")
	waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	// The key made with the Tenant is a step of its creation: no Event.
	noEvents(t, ns, "Tenant", "newsroom", "SigningKeyGenerated")
	if err := hasCondition(tn, tn.Status.ObservedGeneration, v1alpha1.ConditionAvailable, metav1.ConditionTrue, v1alpha1.ReasonReplicasReady); err != nil {
		t.Error(err)
	}
	if tn.Status.ReadyReplicas != 1 {
		t.Errorf("readyReplicas %d", tn.Status.ReadyReplicas)
	}
	waitEvent(t, ns, "Tenant", "newsroom", v1alpha1.ReasonReady)
	// Progress on the way (compiled, waiting for replicas) is in the
	// status, not in Events.
	noEvents(t, ns, "Tenant", "newsroom", v1alpha1.ReasonCompiled, v1alpha1.ReasonReplicasNotReady, v1alpha1.ReasonReplicasReady, v1alpha1.ReasonConfigurationNotLoaded)

	// A key Secret that holds no usable key gets a new one, and a Warning:
	// the tokens issued with the old one are invalid.
	mustGet(t, ns, "newsroom-bus-signing-key", key)
	key.Data[SigningKeyKey] = []byte("short")
	if err := k8s.Update(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ns, "Tenant", "newsroom", "SigningKeyGenerated")
	eventually(t, "a new signing key", func() error {
		if err := get(ns, "newsroom-bus-signing-key", key); err != nil {
			return err
		}
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).Match(key.Data[SigningKeyKey]) {
			return fmt.Errorf("signing key %q", key.Data[SigningKeyKey])
		}
		return nil
	})

	// A replica that stops being ready takes Ready back to False.
	eventually(t, "one replica unready", func() error {
		if err := get(ns, "newsroom-bus", sts); err != nil {
			return err
		}
		sts.Status.ReadyReplicas, sts.Status.AvailableReplicas = 0, 0
		return k8s.Status().Update(context.Background(), sts)
	})
	waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady)
	// Ready lost is a Warning.
	waitEvent(t, ns, "Tenant", "newsroom", v1alpha1.ReasonReplicasNotReady)
}

// TestTenantUpdate proves a spec change reaches the StatefulSet and the
// configuration, moves observedGeneration, keeps the signing key, and
// leaves the running bus pods alone: not restarted, and not written at all
// (the operator holds no right to patch pods; the kubelet's volume refresh
// carries the configuration).
func TestTenantUpdate(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "daily"))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "daily", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
	firstHash := tn.Status.ConfigHash
	key := &corev1.Secret{}
	mustGet(t, ns, "daily-bus-signing-key", key)

	// A bus pod, as the StatefulSet controller would make it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "daily-bus-0", Labels: tenantLabels(tn)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "bus", Image: testBusImage}}},
	}
	create(t, pod)
	podUID, podVersion := pod.UID, pod.ResourceVersion

	update(t, ns, "daily", tn, func(tn *v1alpha1.Tenant) {
		tn.Spec.Image = "registry.example/storybus:v2"
		tn.Spec.TokenTTL = &metav1.Duration{Duration: 15 * time.Minute}
		tn.Spec.Limits = &v1alpha1.Limits{RatePerSecond: 50, Burst: 100}
	})
	gen := tn.Generation
	waitWorkspace(t, ns, "daily", func(w *config.Workspace) error {
		if w.TokenTTL.Duration != 15*time.Minute || w.Limits.RatePerSecond != 50 {
			return fmt.Errorf("tokenTTL %s, limits %+v", w.TokenTTL, w.Limits)
		}
		return nil
	})
	eventually(t, "new image", func() error {
		sts := &appsv1.StatefulSet{}
		if err := get(ns, "daily-bus", sts); err != nil {
			return err
		}
		if img := sts.Spec.Template.Spec.Containers[0].Image; img != "registry.example/storybus:v2" {
			return fmt.Errorf("image %s", img)
		}
		return nil
	})
	eventually(t, "status of the new generation", func() error {
		if err := get(ns, "daily", tn); err != nil {
			return err
		}
		if tn.Status.ObservedGeneration != gen || tn.Status.ConfigHash == firstHash {
			return fmt.Errorf("observedGeneration %d (want %d), hash %s", tn.Status.ObservedGeneration, gen, tn.Status.ConfigHash)
		}
		return hasCondition(tn, tn.Status.ObservedGeneration, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
	})
	mustGet(t, ns, pod.Name, pod)
	if pod.UID != podUID || !pod.DeletionTimestamp.IsZero() {
		t.Error("the bus pod was replaced or deleted on a configuration change")
	}
	if pod.ResourceVersion != podVersion {
		t.Errorf("the bus pod was written on a configuration change: resourceVersion %s, was %s; annotations %v", pod.ResourceVersion, podVersion, pod.Annotations)
	}
	after := &corev1.Secret{}
	mustGet(t, ns, "daily-bus-signing-key", after)
	if string(after.Data[SigningKeyKey]) != string(key.Data[SigningKeyKey]) {
		t.Error("the signing key changed on a spec update")
	}
}

// TestTenantDriftRepair proves that the StatefulSet, the ConfigMap and a
// Service edited or deleted by hand are restored.
func TestTenantDriftRepair(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "drift"))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "drift", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
	cm := &corev1.ConfigMap{}
	mustGet(t, ns, "drift-bus-config", cm)
	want := cm.Data[ConfigFile]

	stsRestored := func() error {
		sts := &appsv1.StatefulSet{}
		if err := get(ns, "drift-bus", sts); err != nil {
			return err
		}
		c := sts.Spec.Template.Spec.Containers[0]
		if c.Image != testBusImage || *sts.Spec.Replicas != 1 || !slices.Contains(c.Args, "serve") {
			return fmt.Errorf("image %s, replicas %d, args %v", c.Image, *sts.Spec.Replicas, c.Args)
		}
		return nil
	}
	t.Run("statefulset edited", func(t *testing.T) {
		update(t, ns, "drift-bus", &appsv1.StatefulSet{}, func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Image = "evil.example/miner:latest"
			s.Spec.Template.Spec.Containers[0].Args = []string{"mine"}
			s.Spec.Replicas = new(int32(7))
		})
		eventually(t, "statefulset restored", stsRestored)
	})
	// The operator's cache keeps of a StatefulSet's pod template only its
	// containers' names and arguments: a change of the rest alone is
	// found by the digest of what was applied, and repaired.
	t.Run("statefulset image alone edited", func(t *testing.T) {
		update(t, ns, "drift-bus", &appsv1.StatefulSet{}, func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Image = "evil.example/miner:latest"
		})
		eventually(t, "statefulset restored", stsRestored)
	})
	t.Run("statefulset deleted", func(t *testing.T) {
		sts := &appsv1.StatefulSet{}
		mustGet(t, ns, "drift-bus", sts)
		uid := sts.UID
		if err := k8s.Delete(context.Background(), sts); err != nil {
			t.Fatal(err)
		}
		eventually(t, "statefulset recreated", func() error {
			if err := get(ns, "drift-bus", sts); err != nil {
				return err
			}
			if sts.UID == uid {
				return errNotYet
			}
			return stsRestored()
		})
	})
	cmRestored := func() error {
		if err := get(ns, "drift-bus-config", cm); err != nil {
			return err
		}
		if cm.Data[ConfigFile] != want {
			return fmt.Errorf("configuration %q", cm.Data[ConfigFile])
		}
		return nil
	}
	t.Run("configmap edited", func(t *testing.T) {
		update(t, ns, "drift-bus-config", &corev1.ConfigMap{}, func(c *corev1.ConfigMap) {
			c.Data[ConfigFile] = "workspace: hijacked\n"
		})
		eventually(t, "configmap restored", cmRestored)
	})
	t.Run("configmap deleted", func(t *testing.T) {
		if err := k8s.Delete(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
		eventually(t, "configmap recreated", cmRestored)
	})
	t.Run("service deleted", func(t *testing.T) {
		svc := &corev1.Service{}
		mustGet(t, ns, "drift-bus", svc)
		if err := k8s.Delete(context.Background(), svc); err != nil {
			t.Fatal(err)
		}
		eventually(t, "service recreated", func() error {
			s := &corev1.Service{}
			if err := get(ns, "drift-bus", s); err != nil {
				return err
			}
			if s.UID == svc.UID {
				return errNotYet
			}
			return nil
		})
	})
}

// TestTenantDeletion proves the finalizer applies deletionPolicy: retain
// keeps the bus's volumes, delete deletes them, and volumes of other
// StatefulSets are never touched.
func TestTenantDeletion(t *testing.T) {
	for _, policy := range []v1alpha1.DeletionPolicy{v1alpha1.DeletionPolicyRetain, v1alpha1.DeletionPolicyDelete} {
		t.Run(string(policy), func(t *testing.T) {
			ns := newNamespace(t)
			create(t, newTenant(ns, "gone", func(tn *v1alpha1.Tenant) { tn.Spec.DeletionPolicy = policy }))
			tn := &v1alpha1.Tenant{}
			waitCondition(t, ns, "gone", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
			// The workload controller makes the bus once the configuration
			// controller has compiled it.
			sts := &appsv1.StatefulSet{}
			eventually(t, "the bus", func() error { return get(ns, "gone-bus", sts) })
			wantRetention := appsv1.RetainPersistentVolumeClaimRetentionPolicyType
			if policy == v1alpha1.DeletionPolicyDelete {
				wantRetention = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
			}
			if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != wantRetention {
				t.Errorf("retention policy %+v, want whenDeleted %s", p, wantRetention)
			}

			// Volumes as the StatefulSet controller makes them (labelled
			// with the selector), and one of another workload.
			pvc := func(name string, labels map[string]string) *corev1.PersistentVolumeClaim {
				return &corev1.PersistentVolumeClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
					},
				}
			}
			create(t, pvc("data-gone-bus-0", selectorLabels(tn)))
			create(t, pvc("data-other-0", selectorLabels(tn)))
			create(t, pvc("unrelated", nil))

			if err := k8s.Delete(context.Background(), tn); err != nil {
				t.Fatal(err)
			}
			eventually(t, "tenant gone", func() error { return gone(ns, "gone", &v1alpha1.Tenant{}) })

			deleted := func(name string) bool {
				p := &corev1.PersistentVolumeClaim{}
				err := get(ns, name, p)
				return err != nil || !p.DeletionTimestamp.IsZero()
			}
			if policy == v1alpha1.DeletionPolicyDelete {
				eventually(t, "bus volume deleted", func() error {
					if !deleted("data-gone-bus-0") {
						return errNotYet
					}
					return nil
				})
				waitEvent(t, ns, "Tenant", "gone", "VolumesDeleted")
			} else {
				waitEvent(t, ns, "Tenant", "gone", "VolumesRetained")
				if deleted("data-gone-bus-0") {
					t.Error("retain deleted the bus volume")
				}
			}
			if deleted("data-other-0") || deleted("unrelated") {
				t.Error("a volume that is not the bus's was deleted")
			}
		})
	}
}

// TestTenantExternalStorage proves an external NATS cluster replaces the
// volume with --nats-url, stream replicas and the mounted credentials.
func TestTenantExternalStorage(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "scale", func(tn *v1alpha1.Tenant) {
		tn.Spec.Replicas = new(int32(3))
		tn.Spec.Storage = &v1alpha1.TenantStorage{External: &v1alpha1.ExternalStorage{
			URL:                  "nats://n1:4222,nats://n2:4222",
			CredentialsSecretRef: &v1alpha1.SecretKeyReference{Name: "nats"},
		}}
	}))
	sts := &appsv1.StatefulSet{}
	eventually(t, "statefulset", func() error { return get(ns, "scale-bus", sts) })
	c := sts.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--nats-url nats://n1:4222,nats://n2:4222", "--replicas 3", "--nats-credentials /etc/storybus/nats/nats.creds"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--data-dir") || len(sts.Spec.VolumeClaimTemplates) != 0 || *sts.Spec.Replicas != 3 {
		t.Errorf("external storage: args %q, claims %d, replicas %d", args, len(sts.Spec.VolumeClaimTemplates), *sts.Spec.Replicas)
	}
	serveTenant(t, ns, "scale")
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "scale", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if tn.Status.ReadyReplicas != 3 {
		t.Errorf("readyReplicas %d", tn.Status.ReadyReplicas)
	}
	update(t, ns, "scale", tn, func(tn *v1alpha1.Tenant) { tn.Spec.Replicas = new(int32(0)) })
	waitCondition(t, ns, "scale", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonScaledToZero)
}

// TestTenantWorkspaceConflict proves that two Tenants cannot share a
// workspace id on one external NATS cluster: the newer one gets no bus and
// says why, and takes over when the older one is deleted. The same id on
// another cluster is no conflict, and pointing an older Tenant at the
// cluster later never displaces the bus serving there.
func TestTenantWorkspaceConflict(t *testing.T) {
	first, second, elsewhere := newNamespace(t), newNamespace(t), newNamespace(t)
	external := func(url string) func(*v1alpha1.Tenant) {
		return func(tn *v1alpha1.Tenant) {
			tn.Spec.WorkspaceID = "shared-" + first
			tn.Spec.Storage = &v1alpha1.TenantStorage{External: &v1alpha1.ExternalStorage{URL: url}}
		}
	}
	create(t, newTenant(first, "desk", external("nats://a:4222,nats://b:4222")))
	create(t, newTenant(elsewhere, "desk", external("nats://other:4222")))
	for _, ns := range []string{first, elsewhere} {
		eventually(t, "a bus in "+ns, func() error { return get(ns, "desk-bus", &appsv1.StatefulSet{}) })
	}
	// Creation times have whole seconds; Tenants created in the same second
	// are ordered by name instead. Let the first two be older by the clock.
	time.Sleep(time.Second)

	create(t, newTenant(second, "desk", external("nats://c:4222, tls://B/")))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, second, "desk", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonWorkspaceConflict)
	if msg := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.ConditionReady).Message; !strings.Contains(msg, first+"/desk") {
		t.Errorf("message %q does not name the Tenant in the way", msg)
	}
	waitEvent(t, second, "Tenant", "desk", v1alpha1.ReasonWorkspaceConflict)
	if err := get(second, "desk-bus", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the conflicting Tenant got a bus: %v", err)
	}

	if err := k8s.Delete(context.Background(), newTenant(first, "desk")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the waiting Tenant's bus", func() error { return get(second, "desk-bus", &appsv1.StatefulSet{}) })
	waitCondition(t, second, "desk", tn, tenantGen, v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady)

	// The older Tenant elsewhere moves to the cluster second now serves: it
	// waits, and both buses stay as they were.
	other := &v1alpha1.Tenant{}
	update(t, elsewhere, "desk", other, func(tn *v1alpha1.Tenant) { tn.Spec.Storage.External.URL = "nats://b:4222" })
	waitCondition(t, elsewhere, "desk", other, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonWorkspaceConflict)
	if msg := meta.FindStatusCondition(other.Status.Conditions, v1alpha1.ConditionReady).Message; !strings.Contains(msg, second+"/desk") {
		t.Errorf("message %q does not name the serving Tenant", msg)
	}
	kept := &appsv1.StatefulSet{}
	mustGet(t, elsewhere, "desk-bus", kept)
	if args := strings.Join(kept.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--nats-url nats://other:4222") {
		t.Errorf("the waiting Tenant's bus was changed: %s", args)
	}
	mustGet(t, second, "desk-bus", &appsv1.StatefulSet{})
}

// TestTenantNameConflict proves the operator never adopts an object it did
// not make: the Tenant reports NameConflict and the object is untouched.
func TestTenantNameConflict(t *testing.T) {
	ns := newNamespace(t)
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "clash-bus-config"}, Data: map[string]string{"x": "y"}}
	create(t, theirs)
	create(t, newTenant(ns, "clash"))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "clash", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNameConflict)
	waitEvent(t, ns, "Tenant", "clash", v1alpha1.ReasonNameConflict)
	mustGet(t, ns, "clash-bus-config", theirs)
	if theirs.Data["x"] != "y" || len(theirs.OwnerReferences) != 0 {
		t.Errorf("the operator changed a ConfigMap it does not own: %+v", theirs)
	}
	if err := k8s.Delete(context.Background(), theirs); err != nil {
		t.Fatal(err)
	}
	// Nothing watches the deleted object's name for the Tenant; a spec
	// change reconciles it again.
	update(t, ns, "clash", tn, func(tn *v1alpha1.Tenant) { tn.Spec.Image = "registry.example/storybus:v3" })
	waitCondition(t, ns, "clash", tn, tenantGen, v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady)
}

// TestTenantValidation proves the CRD's own checks: immutable fields,
// bounds and enums are refused by the API server.
func TestTenantValidation(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	refused := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one containing %q", what, err, want)
		}
	}
	refused("short idempotency window", k8s.Create(ctx, newTenant(ns, "a", func(tn *v1alpha1.Tenant) {
		tn.Spec.IdempotencyWindow = &metav1.Duration{Duration: 24 * time.Hour}
	})), "idempotencyWindow must be at least 168h")
	refused("embedded with two replicas", k8s.Create(ctx, newTenant(ns, "b", func(tn *v1alpha1.Tenant) { tn.Spec.Replicas = new(int32(2)) })),
		"embedded storage serves one replica")
	refused("both storages", k8s.Create(ctx, newTenant(ns, "c", func(tn *v1alpha1.Tenant) {
		tn.Spec.Storage = &v1alpha1.TenantStorage{Embedded: &v1alpha1.EmbeddedStorage{}, External: &v1alpha1.ExternalStorage{URL: "nats://x:4222"}}
	})), "set exactly one of embedded and external")
	refused("long name", k8s.Create(ctx, newTenant(ns, strings.Repeat("x", 41))), "at most 40 characters")
	refused("bad deletion policy", k8s.Create(ctx, newTenant(ns, "d", func(tn *v1alpha1.Tenant) { tn.Spec.DeletionPolicy = "shred" })), "Unsupported value")
	refused("bad CIDR", k8s.Create(ctx, newTenant(ns, "e", func(tn *v1alpha1.Tenant) {
		tn.Spec.Firewall = &v1alpha1.Firewall{AllowedCIDRs: []string{"10.0.0.0/33"}}
	})), "every entry must be a CIDR")

	create(t, newTenant(ns, "fixed", func(tn *v1alpha1.Tenant) { tn.Spec.WorkspaceID = "ws-fixed" }))
	tenantUpdate := func(mutate func(*v1alpha1.Tenant)) error {
		return tryUpdate(ns, "fixed", &v1alpha1.Tenant{}, mutate)
	}
	refused("workspaceID changed", tenantUpdate(func(tn *v1alpha1.Tenant) { tn.Spec.WorkspaceID = "ws-other" }), "workspaceID is immutable")
	refused("workspaceID removed", tenantUpdate(func(tn *v1alpha1.Tenant) { tn.Spec.WorkspaceID = "" }), "workspaceID is immutable")
	refused("volume size shrunk", tenantUpdate(func(tn *v1alpha1.Tenant) { tn.Spec.Storage.Embedded.Size = new(resource.MustParse("5Gi")) }), "size can only grow")
	refused("pod label the operator selects by", tenantUpdate(func(tn *v1alpha1.Tenant) {
		tn.Spec.Template = &v1alpha1.TenantTemplate{Pod: &v1alpha1.PodTemplate{Metadata: &v1alpha1.PodTemplateMetadata{
			Labels: map[string]string{"team": "news", "app.kubernetes.io/instance": "other"}}}}
	}), "are the operator's: it selects its pods by them")
	refused("pod annotation of the operator's", tenantUpdate(func(tn *v1alpha1.Tenant) {
		tn.Spec.Template = &v1alpha1.TenantTemplate{Pod: &v1alpha1.PodTemplate{Metadata: &v1alpha1.PodTemplateMetadata{
			Annotations: map[string]string{v1alpha1.AnnotationConfigHash: "sha256:0"}}}}
	}), "annotations of bus.storybus.io are the operator's")
	refused("bus environment beyond OTEL_*", tenantUpdate(func(tn *v1alpha1.Tenant) {
		tn.Spec.Template = &v1alpha1.TenantTemplate{Pod: &v1alpha1.PodTemplate{Env: []corev1.EnvVar{
			{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://collector:4318"}, {Name: "GODEBUG", Value: "x509sha1=1"}}}}
	}), "only OpenTelemetry's OTEL_* variables")
	if err := tenantUpdate(func(tn *v1alpha1.Tenant) {
		tn.Spec.Template = &v1alpha1.TenantTemplate{Pod: &v1alpha1.PodTemplate{Env: []corev1.EnvVar{
			{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://collector:4318"}}}}
	}); err != nil {
		t.Errorf("an OTEL_* variable refused: %v", err)
	}
	refused("storage kind changed", tenantUpdate(func(tn *v1alpha1.Tenant) {
		tn.Spec.Storage = &v1alpha1.TenantStorage{External: &v1alpha1.ExternalStorage{URL: "nats://x:4222"}}
	}), "the kind of storage")

	create(t, newConnection(ns, "c1", "fixed", func(c *v1alpha1.Connection) { c.Spec.Credentials.Rotate = 2 }))
	connUpdate := func(mutate func(*v1alpha1.Connection)) error {
		return tryUpdate(ns, "c1", &v1alpha1.Connection{}, mutate)
	}
	refused("tenantRef changed", connUpdate(func(c *v1alpha1.Connection) { c.Spec.TenantRef.Name = "other" }), "tenantRef is immutable")
	refused("rotate decreased", connUpdate(func(c *v1alpha1.Connection) { c.Spec.Credentials.Rotate = 1 }), "rotate can only be increased")
	if c := (&v1alpha1.Connection{}); get(ns, "c1", c) == nil && (c.Spec.Active == nil || !*c.Spec.Active) {
		t.Errorf("active defaults to true: %v", c.Spec.Active)
	}

	refused("bad notOwner", k8s.Create(ctx, newPolicy(ns, "p", "fixed", func(p *v1alpha1.OwnershipPolicy) { p.Spec.NotOwner = "ignore" })), "Unsupported value")
	refused("empty grant", k8s.Create(ctx, newGrant(ns, "g", "c1", nil, nil)), "a Grant grants publish, consume or both")
	refused("bad message type", k8s.Create(ctx, newGrant(ns, "g", "c1", &v1alpha1.PublishGrant{MessageTypes: []string{"story.gossip"}}, nil)), "Unsupported value")
	p := newPolicy(ns, "p", "fixed")
	create(t, p)
	mustGet(t, ns, "p", p)
	if p.Spec.NotOwner != v1alpha1.NotOwnerTolerate {
		t.Errorf("notOwner defaults to tolerate: %q", p.Spec.NotOwner)
	}
}

// TestNewTenantReadinessWaitsItsGrace: a new Tenant whose bus is not
// ready yet gets its first readiness (Ready False, ReplicasNotReady) only
// readinessGrace after its configuration compiled, not at once, so
// that a Tenant Ready within the grace has its readiness written once.
func TestNewTenantReadinessWaitsItsGrace(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom"))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady)
	compiled := findCondition(tn.Status.Conditions, v1alpha1.ConditionConfigurationValid)
	ready := findCondition(tn.Status.Conditions, v1alpha1.ConditionReady)
	// Transition times are whole seconds: the grace less one.
	if compiled == nil || ready.LastTransitionTime.Sub(compiled.LastTransitionTime.Time) < readinessGrace-time.Second {
		t.Errorf("Ready %s, ConfigurationValid %+v: want the first readiness %s after the compile", ready.LastTransitionTime, compiled, readinessGrace)
	}
}
