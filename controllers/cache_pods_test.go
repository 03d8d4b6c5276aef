package controllers

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
