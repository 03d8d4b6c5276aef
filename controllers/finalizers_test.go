package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/internal/testutil"
)

// TestTenantFinalizersAreAppliedWithoutConflict: two managers add their
// finalizers to a Tenant read once, as the workload and pool controllers
// do at its creation, and both hold, neither refused for the other's
// write; and a Tenant deleted since it was read is not created again by
// the apply.
func TestTenantFinalizersAreAppliedWithoutConflict(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	tn := newTenant(ns, "two-finalizers")
	create(t, tn)
	first, second := tn.DeepCopy(), tn.DeepCopy()
	if err := addTenantFinalizer(ctx, k8s, first, "example.com/first", "test-first"); err != nil {
		t.Fatal(err)
	}
	if err := addTenantFinalizer(ctx, k8s, second, "example.com/second", "test-second"); err != nil {
		t.Fatalf("the second finalizer, over the Tenant as read before the first: %v", err)
	}
	got := &v1alpha1.Tenant{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(tn), got); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Finalizers, "example.com/first") || !slices.Contains(got.Finalizers, "example.com/second") {
		t.Fatalf("finalizers %v", got.Finalizers)
	}
	// The test's own finalizers go, leaving the operator's, which it
	// writes meanwhile: conflicts with its writes are retried.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(tn), got); err != nil {
			return err
		}
		got.Finalizers = slices.DeleteFunc(got.Finalizers, func(f string) bool { return strings.HasPrefix(f, "example.com/") })
		return k8s.Update(ctx, got)
	}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	gone := newTenant(ns, "gone")
	create(t, gone)
	if err := k8s.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deleted Tenant gone", time.Minute, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(gone), &v1alpha1.Tenant{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
	if err := addTenantFinalizer(ctx, k8s, gone, "example.com/first", "test-first"); err == nil {
		t.Fatal("a finalizer applied to a Tenant deleted since it was read")
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(gone), &v1alpha1.Tenant{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the deleted Tenant after the apply: %v, want not found", err)
	}
}
