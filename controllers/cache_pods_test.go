package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TestCachedPodsKeepWhatTheOperatorReads: a bus pod in the operator's
// cache keeps its status, labels and containers' ports (what readiness
// reads), and none of the rest of its spec.
func TestCachedPodsKeepWhatTheOperatorReads(t *testing.T) {
	ns := newNamespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "desk-bus-0", Labels: tenantLabels(&v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "desk"}})},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "bus", Image: testBusImage, Args: []string{"serve"},
				Env:   []corev1.EnvVar{{Name: "STORYBUS_LOG_LEVEL", Value: "info"}},
				Ports: []corev1.ContainerPort{{Name: opsPortName, ContainerPort: 9090, Protocol: corev1.ProtocolTCP}},
			}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	create(t, pod)
	setPodStatus(t, ns, pod.Name, corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}})

	eventually(t, "the pod's status in the operator's cache", func() error {
		cached := &corev1.Pod{}
		if err := managerCache.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: pod.Name}, cached); err != nil {
			return err
		}
		if !podReady(cached) || cached.Status.PodIP != "10.0.0.7" || cached.Labels[LabelTenant] != "desk" {
			return fmt.Errorf("cached pod: ready %v, IP %q, labels %v", podReady(cached), cached.Status.PodIP, cached.Labels)
		}
		if got := containerPort(cached, opsPortName); got != 9090 {
			return fmt.Errorf("cached pod's %s port: %d, want 9090", opsPortName, got)
		}
		c := cached.Spec.Containers[0]
		if c.Image != "" || len(c.Env) != 0 || len(c.Args) != 0 || len(cached.Spec.Volumes) != 0 {
			return fmt.Errorf("cached pod keeps more of its spec than names and ports: %+v", cached.Spec)
		}
		return nil
	})
}

// TestCachedStatefulSetsKeepWhatTheOperatorReads: a StatefulSet in the
// operator's cache keeps its replicas, volume claim templates, containers'
// names and arguments and status, and the digest of what an apply sets;
// none of the rest of its pod template. A change of status keeps the
// digest; a change of the template makes a new one.
func TestCachedStatefulSetsKeepWhatTheOperatorReads(t *testing.T) {
	ns := newNamespace(t)
	labels := tenantLabels(&v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "desk"}})
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "desk-bus", Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas: new(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"a": "b"}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "bus", Image: testBusImage, Args: []string{"serve", "--nats-url", "nats://nats:4222"},
						Env: []corev1.EnvVar{{Name: "STORYBUS_LOG_LEVEL", Value: "info"}},
					}},
					Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
	create(t, sts)
	whole := &appsv1.StatefulSet{}
	mustGet(t, ns, sts.Name, whole)
	want, err := appliedFieldsDigest(whole, whole.Spec)
	if err != nil {
		t.Fatal(err)
	}

	cached := &appsv1.StatefulSet{}
	readCache := func(rv string) error {
		if err := managerCache.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: sts.Name}, cached); err != nil {
			return err
		}
		if cached.ResourceVersion != rv {
			return errNotYet
		}
		return nil
	}
	eventually(t, "the StatefulSet in the operator's cache", func() error { return readCache(whole.ResourceVersion) })
	c := cached.Spec.Template.Spec.Containers
	switch {
	case cached.Annotations[annotationCachedDigest] != want:
		t.Errorf("cached digest %q, want %q", cached.Annotations[annotationCachedDigest], want)
	case *cached.Spec.Replicas != 3 || len(cached.Spec.VolumeClaimTemplates) != 1 || claimSize(cached) != "1Gi":
		t.Errorf("cached replicas or claim templates lost: %+v", cached.Spec)
	case len(c) != 1 || c[0].Name != "bus" || !slices.Equal(c[0].Args, whole.Spec.Template.Spec.Containers[0].Args):
		t.Errorf("cached containers' names and arguments lost: %+v", c)
	case c[0].Image != "" || len(c[0].Env) != 0 || len(cached.Spec.Template.Spec.Volumes) != 0 || len(cached.Spec.Template.Annotations) != 0:
		t.Errorf("cached StatefulSet keeps more of its pod template than names and arguments: %+v", cached.Spec.Template)
	}
	if whole.Annotations[annotationCachedDigest] != "" {
		t.Errorf("the API server's copy carries the cache's digest: %v", whole.Annotations)
	}

	// A change of status keeps the digest.
	whole.Status = appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 2, CurrentRevision: "r1"}
	if err := k8s.Status().Update(context.Background(), whole); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the status in the cache", func() error { return readCache(whole.ResourceVersion) })
	if cached.Status.ReadyReplicas != 2 || cached.Annotations[annotationCachedDigest] != want {
		t.Errorf("after a change of status: ready %d, digest %q, want 2 and %q", cached.Status.ReadyReplicas, cached.Annotations[annotationCachedDigest], want)
	}

	// A change of the pod template, even of a part the cache drops, makes
	// a new one.
	update(t, ns, sts.Name, whole, func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.Containers[0].Env[0].Value = "debug"
	})
	eventually(t, "the changed template in the cache", func() error { return readCache(whole.ResourceVersion) })
	if d := cached.Annotations[annotationCachedDigest]; d == want || d == "" {
		t.Errorf("after a change of the template the digest is %q, as before", d)
	}
}

// claimSize is the storage request of sts's first volume claim template.
func claimSize(sts *appsv1.StatefulSet) string {
	q := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
	return q.String()
}
