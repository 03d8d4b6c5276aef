package controllers

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

func TestPodProblems(t *testing.T) {
	pod := func(name string, st corev1.PodStatus) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: st}
	}
	waiting := func(reason, msg string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "bus", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}},
		}}}
	}
	crashing := waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container")
	crashing.ContainerStatuses[0].RestartCount = 7
	crashing.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
		ExitCode: 1, Reason: "Error", Message: "workspace \"newsroom\": policies[0] house: rego_parse_error"}
	oomed := waiting("CrashLoopBackOff", "")
	oomed.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}
	notReady := corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "bus", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	ready := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	for name, tc := range map[string]struct {
		pods []corev1.Pod
		pvcs []corev1.PersistentVolumeClaim
		want []string
	}{
		"unschedulable": {
			pods: []corev1.Pod{pod("b-0", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are available: 3 Insufficient memory."}}})},
			want: []string{"pod b-0: unschedulable: 0/3 nodes are available: 3 Insufficient memory."},
		},
		"image pull": {
			pods: []corev1.Pod{pod("b-0", waiting("ImagePullBackOff", `Back-off pulling image "registry.example/storybus:nope"`))},
			want: []string{`pod b-0: container bus cannot pull its image (ImagePullBackOff): Back-off pulling image "registry.example/storybus:nope"`},
		},
		"crash loop with the last termination message": {
			pods: []corev1.Pod{pod("b-0", crashing)},
			want: []string{`pod b-0: container bus is crash-looping (7 restarts), last exit code 1: workspace "newsroom": policies[0] house: rego_parse_error`},
		},
		"crash loop without a message": {
			pods: []corev1.Pod{pod("b-0", oomed)},
			want: []string{"pod b-0: container bus is crash-looping (0 restarts), last exit code 137 (OOMKilled)"},
		},
		"running, probe failing": {
			pods: []corev1.Pod{pod("b-0", notReady)},
			want: []string{"pod b-0: container bus is running but not ready (its readiness probe fails)"},
		},
		"volume claim pending, ready pods left out, pods in order": {
			pods: []corev1.Pod{pod("b-1", corev1.PodStatus{Phase: corev1.PodPending}), pod("b-0", ready)},
			pvcs: []corev1.PersistentVolumeClaim{
				{ObjectMeta: metav1.ObjectMeta{Name: "data-b-1"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}},
				{ObjectMeta: metav1.ObjectMeta{Name: "data-b-0"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}},
			},
			want: []string{"pod b-1: pending", "volume claim data-b-1 is pending (no volume bound: check its StorageClass)"},
		},
		"nothing known": {
			pods: []corev1.Pod{pod("b-0", ready)},
		},
	} {
		if got := podProblems(tc.pods, tc.pvcs); !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", name, got, tc.want)
		}
	}
}

// TestTenantSaysWhyPodsAreNotReady proves the Tenant's Ready message
// carries what kubelet reports of a bus pod that is not ready.
func TestTenantSaysWhyPodsAreNotReady(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "crashy"))
	eventually(t, "the StatefulSet", func() error { return get(ns, "crashy-bus", &appsv1.StatefulSet{}) })
	startFakePod(t, ns, "crashy", "crashy-bus-0", "127.0.0.1", 1)
	st := corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "bus", RestartCount: 4,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "store: no space left on device"}},
	}}}
	setPodStatus(t, ns, "crashy-bus-0", st)
	tn := &v1alpha1.Tenant{}
	eventually(t, "the pod's reason in Ready", func() error {
		if err := get(ns, "crashy", tn); err != nil {
			return err
		}
		c := findCondition(tn.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Reason != v1alpha1.ReasonReplicasNotReady || !strings.Contains(c.Message, "crash-looping (4 restarts), last exit code 1: store: no space left on device") {
			return errNotYet
		}
		return nil
	})
}
