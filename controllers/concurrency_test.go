package controllers

import (
	"context"
	"fmt"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/storybus/storybus/api/v1alpha1"
)

// testBusResourcesAtStart is testBusResources as the suite began: the
// operator's defaults must never change under it.
var testBusResourcesAtStart = *testBusResources.DeepCopy()

// TestConcurrentReconciles reconciles many Tenants at once (the suite's
// manager runs suiteConcurrentReconciles of a kind at a time), each with
// the maps an apply configuration could share with the cache or the
// operator's options: its own resources, pod labels, annotations and node
// selector, or the operator's default resources. Under the race detector
// (make race) a shared map is a reported race; without it, a
// "concurrent map writes" crash of the whole suite when two reconciles
// meet. Afterwards neither the cached Tenants nor the operator's defaults
// have changed.
func TestConcurrentReconciles(t *testing.T) {
	ns := newNamespace(t)
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			create(t, newTenant(ns, fmt.Sprintf("c%02d", i), func(tn *v1alpha1.Tenant) {
				if i%2 == 1 {
					return // the operator's default resources
				}
				tn.Spec.Resources = corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dMi", 512+i))},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
				}
				tn.Spec.Template = &v1alpha1.TenantTemplate{Pod: &v1alpha1.PodTemplate{
					Metadata:     &v1alpha1.PodTemplateMetadata{Labels: map[string]string{"desk": "news"}, Annotations: map[string]string{"example.com/n": fmt.Sprint(i)}},
					NodeSelector: map[string]string{"pool": "bus"},
				}}
			}))
		})
	}
	wg.Wait()

	for i := range n {
		name := fmt.Sprintf("c%02d", i)
		sts := &appsv1.StatefulSet{}
		eventually(t, "StatefulSet "+name, func() error {
			if err := get(ns, name+"-bus", sts); err != nil {
				return err
			}
			want := testBusResourcesAtStart
			if i%2 == 0 {
				tn := &v1alpha1.Tenant{}
				mustGet(t, ns, name, tn)
				want = tn.Spec.Resources
			}
			if got := sts.Spec.Template.Spec.Containers[0].Resources; !equality.Semantic.DeepEqual(got, want) {
				return fmt.Errorf("resources %v, want %v", got, want)
			}
			return nil
		})
	}

	if !equality.Semantic.DeepEqual(testBusResources, testBusResourcesAtStart) {
		t.Errorf("the operator's default resources changed: %v, were %v", testBusResources, testBusResourcesAtStart)
	}
	for i := range n {
		name := fmt.Sprintf("c%02d", i)
		stored, cached := &v1alpha1.Tenant{}, &v1alpha1.Tenant{}
		mustGet(t, ns, name, stored)
		if err := managerCache.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, cached); err != nil {
			t.Fatal(err)
		}
		// Nothing writes a Tenant's spec after its creation: the cache's
		// copy is the stored one, whatever its status.
		if !equality.Semantic.DeepEqual(cached.Spec, stored.Spec) {
			t.Errorf("the cached Tenant %s's spec differs from the stored one:\n cached %+v\n stored %+v", name, cached.Spec, stored.Spec)
		}
	}
}
