package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
)

// TestTenantTopicCapacity: spec.capacity.topic reaches the compiled
// configuration as its topic limits, follows a change, and goes with the
// field; the API server refuses a bound that is negative, too small to
// hold a few of the largest messages, or beyond any store.
func TestTenantTopicCapacity(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	topic := func(maxBytes string, maxMessages int64) func(*v1alpha1.Tenant) {
		return func(tn *v1alpha1.Tenant) {
			tc := &v1alpha1.TopicCapacity{MaxMessages: maxMessages}
			if maxBytes != "" {
				tc.MaxBytes = new(resource.MustParse(maxBytes))
			}
			tn.Spec.Capacity = &v1alpha1.TenantCapacity{Topic: tc}
		}
	}
	limits := func(bytes, messages int64) func(*config.Workspace) error {
		return func(w *config.Workspace) error {
			if w.Topic.Bytes() != bytes || w.Topic.MaxMessages != messages {
				return fmt.Errorf("topic limits %d bytes, %d messages; want %d and %d", w.Topic.Bytes(), w.Topic.MaxMessages, bytes, messages)
			}
			return nil
		}
	}

	create(t, newTenant(ns, "bounded", topic("10Gi", 5000)))
	waitWorkspace(t, ns, "bounded", limits(10<<30, 5000))
	update(t, ns, "bounded", &v1alpha1.Tenant{}, topic("20Gi", 0))
	waitWorkspace(t, ns, "bounded", limits(20<<30, 0))
	update(t, ns, "bounded", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.Capacity = nil })
	waitWorkspace(t, ns, "bounded", limits(0, 0))

	for i, tc := range []struct {
		maxBytes    string
		maxMessages int64
		want        string
	}{
		{"-1Gi", 0, "maxBytes must be between 1Mi and 1Pi"},
		{"512Ki", 0, "maxBytes must be between 1Mi and 1Pi"},
		{"2Pi", 0, "maxBytes must be between 1Mi and 1Pi"},
		{"", -5, "should be greater than or equal to 1"},
		{"", 10_000_000_000_000, "should be less than or equal to 1000000000000"},
	} {
		err := k8s.Create(ctx, newTenant(ns, fmt.Sprint("refused-", i), topic(tc.maxBytes, tc.maxMessages)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("maxBytes %q, maxMessages %d: err = %v, want one containing %q", tc.maxBytes, tc.maxMessages, err, tc.want)
		}
	}
}
