package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
)

// TestTenantTopicCapacity: spec.capacity.topic reaches the compiled
// configuration as its topic limits and retention, follows a change, and
// goes with the field; the API server refuses a bound that is negative,
// too small to hold a few of the largest messages, or beyond any store,
// and a retention under a week or under the Tenant's idempotency window.
func TestTenantTopicCapacity(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	topic := func(maxBytes string, maxMessages int64, maxAge time.Duration) func(*v1alpha1.Tenant) {
		return func(tn *v1alpha1.Tenant) {
			tc := &v1alpha1.TopicCapacity{MaxMessages: maxMessages}
			if maxBytes != "" {
				tc.MaxBytes = new(resource.MustParse(maxBytes))
			}
			if maxAge != 0 {
				tc.MaxAge = &metav1.Duration{Duration: maxAge}
			}
			tn.Spec.Capacity = &v1alpha1.TenantCapacity{Topic: tc}
		}
	}
	limits := func(bytes, messages int64, maxAge time.Duration) func(*config.Workspace) error {
		return func(w *config.Workspace) error {
			if w.Topic.Bytes() != bytes || w.Topic.MaxMessages != messages || w.Topic.MaxAge.Duration != maxAge {
				return fmt.Errorf("topic limits %d bytes, %d messages, max age %s; want %d, %d and %s", w.Topic.Bytes(), w.Topic.MaxMessages, w.Topic.MaxAge.Duration, bytes, messages, maxAge)
			}
			return nil
		}
	}
	month := 30 * 24 * time.Hour

	create(t, newTenant(ns, "bounded", topic("10Gi", 5000, 0)))
	waitWorkspace(t, ns, "bounded", limits(10<<30, 5000, 0))
	update(t, ns, "bounded", &v1alpha1.Tenant{}, topic("20Gi", 0, month))
	waitWorkspace(t, ns, "bounded", limits(20<<30, 0, month))
	update(t, ns, "bounded", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.Capacity = nil })
	waitWorkspace(t, ns, "bounded", limits(0, 0, 0))

	for i, tc := range []struct {
		maxBytes    string
		maxMessages int64
		maxAge      time.Duration
		window      time.Duration
		want        string
	}{
		{"-1Gi", 0, 0, 0, "maxBytes must be between 1Mi and 1Pi"},
		{"512Ki", 0, 0, 0, "maxBytes must be between 1Mi and 1Pi"},
		{"2Pi", 0, 0, 0, "maxBytes must be between 1Mi and 1Pi"},
		{"", -5, 0, 0, "should be greater than or equal to 1"},
		{"", 10_000_000_000_000, 0, 0, "should be less than or equal to 1000000000000"},
		{"", 0, 24 * time.Hour, 0, "maxAge must be at least 168h"},
		{"", 0, 200 * time.Hour, 336 * time.Hour, "capacity.topic.maxAge must be at least idempotencyWindow"},
	} {
		tn := newTenant(ns, fmt.Sprint("refused-", i), topic(tc.maxBytes, tc.maxMessages, tc.maxAge))
		if tc.window != 0 {
			tn.Spec.IdempotencyWindow = &metav1.Duration{Duration: tc.window}
		}
		err := k8s.Create(ctx, tn)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("maxBytes %q, maxMessages %d, maxAge %s: err = %v, want one containing %q", tc.maxBytes, tc.maxMessages, tc.maxAge, err, tc.want)
		}
	}
}

// TestPooledTenantKeepsItsIdempotencyWindow: the API server refuses a
// change of a pooled Tenant's idempotencyWindow (its records are in the
// pool's bucket of that window), set or defaulted, and lets a Tenant with
// a bus of its own change it.
func TestPooledTenantKeepsItsIdempotencyWindow(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	window := func(d time.Duration) func(*v1alpha1.Tenant) {
		return func(tn *v1alpha1.Tenant) { tn.Spec.IdempotencyWindow = &metav1.Duration{Duration: d} }
	}
	pooled := newTenant(ns, "pooled", func(tn *v1alpha1.Tenant) { tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared"} })
	create(t, pooled)
	for _, d := range []time.Duration{336 * time.Hour, 168*time.Hour + time.Second} {
		eventually(t, fmt.Sprintf("the window set to %s refused", d), func() error {
			tn := &v1alpha1.Tenant{}
			if err := get(ns, "pooled", tn); err != nil {
				return err
			}
			window(d)(tn)
			switch err := k8s.Update(ctx, tn); {
			case apierrors.IsConflict(err):
				return err // the operator wrote meanwhile: read again
			case err == nil || !strings.Contains(err.Error(), "idempotencyWindow of a Tenant on a pool cannot change"):
				t.Fatalf("a pooled Tenant's window set to %s: err = %v, want it refused", d, err)
			}
			return nil
		})
	}
	// The same window, written out, is no change.
	update(t, ns, "pooled", &v1alpha1.Tenant{}, window(168*time.Hour))

	create(t, newTenant(ns, "dedicated"))
	update(t, ns, "dedicated", &v1alpha1.Tenant{}, window(336*time.Hour))
}
