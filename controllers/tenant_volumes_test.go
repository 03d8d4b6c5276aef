package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TestVolumeExpansion grows a Tenant's volume: the operator asks the new
// size of its volume claim (the StatefulSet keeps its claim template, which
// the API server would refuse to change), reports VolumeExpanding until
// the storage provides it, then VolumesExpanded.
func TestVolumeExpansion(t *testing.T) {
	ns := newNamespace(t)
	class := storageClass(t, ns+"-expandable", true)
	create(t, newTenant(ns, "news", embeddedOn(class, "1Gi")))
	pvc := boundClaim(t, ns, "news", class, "1Gi")

	growTo(t, ns, "news", "2Gi")
	eventually(t, "volume claim asks 2Gi", func() error {
		if err := get(ns, pvc.Name, pvc); err != nil {
			return err
		}
		if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "2Gi" {
			return fmt.Errorf("volume claim asks %s", got.String())
		}
		return nil
	})
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionVolumeExpansion, metav1.ConditionFalse, v1alpha1.ReasonVolumeExpanding)
	if msg := findCondition(tn.Status.Conditions, v1alpha1.ConditionVolumeExpansion).Message; !strings.Contains(msg, pvc.Name+" has 1Gi") {
		t.Errorf("message %q does not say which volume has what", msg)
	}
	sts := &appsv1.StatefulSet{}
	mustGet(t, ns, "news-bus", sts)
	if size, _ := claimTemplateSize(sts); size.String() != "1Gi" {
		t.Errorf("claim template %s, want the 1Gi it was created with", size.String())
	}
	// The storage driver and the kubelet do their part.
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
	if err := k8s.Status().Update(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionVolumeExpansion, metav1.ConditionTrue, v1alpha1.ReasonVolumesExpanded)
	if err := hasCondition(tn, tn.Status.ObservedGeneration, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled); err != nil {
		t.Error(err)
	}
}

// TestVolumeExpansionNotSupported: a StorageClass without
// allowVolumeExpansion leaves the volume as it is and says so.
func TestVolumeExpansionNotSupported(t *testing.T) {
	ns := newNamespace(t)
	class := storageClass(t, ns+"-fixed", false)
	create(t, newTenant(ns, "news", embeddedOn(class, "1Gi")))
	pvc := boundClaim(t, ns, "news", class, "1Gi")

	growTo(t, ns, "news", "3Gi")
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionVolumeExpansion, metav1.ConditionFalse, v1alpha1.ReasonVolumeExpansionNotSupported)
	msg := findCondition(tn.Status.Conditions, v1alpha1.ConditionVolumeExpansion).Message
	for _, w := range []string{"asks 3Gi", "StorageClass " + class, "does not allow volume expansion"} {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q lacks %q", msg, w)
		}
	}
	mustGet(t, ns, pvc.Name, pvc)
	if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "1Gi" {
		t.Errorf("volume claim asks %s, want it left at 1Gi", got.String())
	}
	waitEvent(t, ns, "Tenant", "news", v1alpha1.ReasonVolumeExpansionNotSupported)
}

// TestVolumeShrinkRefused: the API server refuses a smaller size, saying
// why.
func TestVolumeShrinkRefused(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "news", embeddedOn("", "2Gi")))
	err := tryUpdate(ns, "news", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) {
		tn.Spec.Storage.Embedded.Size = new(resource.MustParse("1Gi"))
	})
	if err == nil || !strings.Contains(err.Error(), "size can only grow") {
		t.Fatalf("shrinking: %v, want the API server to refuse it", err)
	}
	// The same size written differently is no change.
	if err := tryUpdate(ns, "news", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) {
		tn.Spec.Storage.Embedded.Size = new(resource.MustParse("2048Mi"))
	}); err != nil {
		t.Errorf("2048Mi for 2Gi: %v", err)
	}
}

func TestIsDataClaim(t *testing.T) {
	tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "news"}}
	for name, want := range map[string]bool{
		"data-news-bus-0": true, "data-news-bus-12": true,
		"data-news-bus-": false, "data-news-bus-x": false, "data-news-bus-extra-0": false, "data-newsroom-bus-0": false,
	} {
		if got := isDataClaim(tn, name); got != want {
			t.Errorf("isDataClaim(%q) = %v, want %v", name, got, want)
		}
	}
}

func storageClass(t *testing.T, name string, expandable bool) string {
	t.Helper()
	create(t, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "storage.example.com/disk",
		AllowVolumeExpansion: new(expandable)})
	return name
}

func embeddedOn(class, size string) func(*v1alpha1.Tenant) {
	return func(tn *v1alpha1.Tenant) {
		e := &v1alpha1.EmbeddedStorage{Size: new(resource.MustParse(size))}
		if class != "" {
			e.StorageClassName = new(class)
		}
		tn.Spec.Storage = &v1alpha1.TenantStorage{Embedded: e}
	}
}

// boundClaim plays the StatefulSet controller and the storage: once the
// Tenant's StatefulSet exists, its pod's volume claim exists and is bound.
func boundClaim(t *testing.T, ns, tenant, class, size string) *corev1.PersistentVolumeClaim {
	t.Helper()
	eventually(t, "StatefulSet of "+tenant, func() error { return get(ns, tenant+"-bus", &appsv1.StatefulSet{}) })
	q := resource.MustParse(size)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-" + tenant + "-bus-0",
			Labels: selectorLabels(&v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: tenant}})},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: new(class),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q}},
		},
	}
	create(t, pvc)
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
		AccessModes: pvc.Spec.AccessModes, Capacity: corev1.ResourceList{corev1.ResourceStorage: q}}
	if err := k8s.Status().Update(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

func growTo(t *testing.T, ns, tenant, size string) {
	t.Helper()
	update(t, ns, tenant, &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) {
		tn.Spec.Storage.Embedded.Size = new(resource.MustParse(size))
	})
}
