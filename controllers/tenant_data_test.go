package controllers

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

// TestTenantDeletionOnExternalStorage proves deletionPolicy on an external
// NATS cluster: delete stops the bus and deletes the workspace's stream and
// buckets there, retain keeps them, and a deletion that cannot reach its
// data waits, saying why, until the policy is changed to retain.
func TestTenantDeletionOnExternalStorage(t *testing.T) {
	ns := storetest.Listening(t)
	st, err := store.Connect(store.Options{URL: ns.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx := context.Background()
	// The workspace's data, as its bus makes it.
	seed := func(ws string) {
		t.Helper()
		if _, err := st.OpenWorkspace(ctx, ws, 0, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := st.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: store.LimitsBucket(ws)}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(ws string) []bool {
		t.Helper()
		var out []bool
		_, err := st.JS.Stream(ctx, store.StreamName(ws))
		out = append(out, err == nil)
		for _, b := range []string{store.RecordsBucket(ws), store.LimitsBucket(ws)} {
			_, err := st.JS.KeyValue(ctx, b)
			if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
				t.Fatal(err)
			}
			out = append(out, err == nil)
		}
		return out
	}
	tenant := func(namespace, ws string, policy v1alpha1.DeletionPolicy, creds *v1alpha1.SecretKeyReference) *v1alpha1.Tenant {
		tn := newTenant(namespace, "desk", func(tn *v1alpha1.Tenant) {
			tn.Spec.WorkspaceID = ws
			tn.Spec.DeletionPolicy = policy
			tn.Spec.Storage = &v1alpha1.TenantStorage{External: &v1alpha1.ExternalStorage{URL: ns.ClientURL(), CredentialsSecretRef: creds, Replicas: 1}}
		})
		create(t, tn)
		eventually(t, "a bus in "+namespace, func() error { return get(namespace, "desk-bus", &appsv1.StatefulSet{}) })
		return tn
	}
	deleteTenant := func(tn *v1alpha1.Tenant) {
		t.Helper()
		if err := k8s.Delete(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("delete", func(t *testing.T) {
		namespace := newNamespace(t)
		ws := "ext-delete-" + namespace
		seed(ws)
		deleteTenant(tenant(namespace, ws, v1alpha1.DeletionPolicyDelete, nil))
		eventually(t, "tenant gone", func() error { return gone(namespace, "desk", &v1alpha1.Tenant{}) })
		if got := exists(ws); got[0] || got[1] || got[2] {
			t.Errorf("stream, records, limits exist: %v", got)
		}
		if err := get(namespace, "desk-bus", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Errorf("the bus was not stopped: %v", err)
		}
		waitEvent(t, namespace, "Tenant", "desk", "DataDeleted")
	})
	t.Run("retain", func(t *testing.T) {
		namespace := newNamespace(t)
		ws := "ext-retain-" + namespace
		seed(ws)
		deleteTenant(tenant(namespace, ws, v1alpha1.DeletionPolicyRetain, nil))
		eventually(t, "tenant gone", func() error { return gone(namespace, "desk", &v1alpha1.Tenant{}) })
		if got := exists(ws); !got[0] || !got[1] || !got[2] {
			t.Errorf("stream, records, limits exist: %v", got)
		}
	})
	t.Run("unreachable data waits for retain", func(t *testing.T) {
		namespace := newNamespace(t)
		ws := "ext-stuck-" + namespace
		seed(ws)
		tn := tenant(namespace, ws, v1alpha1.DeletionPolicyDelete, &v1alpha1.SecretKeyReference{Name: "missing"})
		deleteTenant(tn)
		waitEvent(t, namespace, "Tenant", "desk", "DataDeletionFailed")
		if err := get(namespace, "desk", &v1alpha1.Tenant{}); err != nil {
			t.Fatalf("the Tenant went without its data deleted: %v", err)
		}
		update(t, namespace, "desk", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.DeletionPolicy = v1alpha1.DeletionPolicyRetain })
		eventually(t, "tenant gone", func() error { return gone(namespace, "desk", &v1alpha1.Tenant{}) })
		if got := exists(ws); !got[0] || !got[1] || !got[2] {
			t.Errorf("stream, records, limits exist: %v", got)
		}
	})
}
