package controllers

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
)

// TestSecretsCacheHoldsOnlyTheOperators proves the operator's cache holds
// the Secrets it makes and labels, never a Secret a user made, while a
// user's Secret named by a Connection is still read (directly from the API
// server) and a change to it still followed; and that a Secret of the
// operator's whose label was removed is labelled again.
func TestSecretsCacheHoldsOnlyTheOperators(t *testing.T) {
	ns := newNamespace(t)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "user-credentials"},
		StringData: map[string]string{v1alpha1.CredentialsClientIDKey: "user-client", v1alpha1.CredentialsClientSecretKey: "user-secret-0123456789abcdef0123"},
	})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrelated"}, StringData: map[string]string{"k": "v"}})
	create(t, newTenant(ns, "desk"))
	create(t, newConnection(ns, "user", "desk", func(c *v1alpha1.Connection) { c.Spec.Credentials.SecretName = "user-credentials" }))
	create(t, newConnection(ns, "generated", "desk"))

	// The user's Secret is read: its client is configured with its secret.
	configured := func(secret string) func(*config.Workspace) error {
		return func(w *config.Workspace) error {
			cc, ok := w.ConnectionByClientID("user-client")
			if !ok || !auth.CheckSecret(cc, secret) {
				return fmt.Errorf("user-client not configured with %q: %+v", secret, w.Connections)
			}
			if _, ok := w.Connection("generated"); !ok {
				return fmt.Errorf("generated not configured")
			}
			return nil
		}
	}
	waitWorkspace(t, ns, "desk", configured("user-secret-0123456789abcdef0123"))

	inCache := func(name string) error {
		return managerCache.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &corev1.Secret{})
	}
	for _, name := range []string{"desk-bus-signing-key", "generated-credentials"} {
		eventually(t, name+" in the operator's cache", func() error { return inCache(name) })
	}
	for _, name := range []string{"user-credentials", "unrelated"} {
		if err := inCache(name); !apierrors.IsNotFound(err) {
			t.Errorf("the user's Secret %s in the operator's cache: %v, want not found", name, err)
		}
	}

	// A change to the user's Secret reaches the configuration: the
	// operator watches the metadata of the Secrets it does not cache.
	update(t, ns, "user-credentials", &corev1.Secret{}, func(s *corev1.Secret) {
		s.Data[v1alpha1.CredentialsClientSecretKey] = []byte("user-secret-changed-0123456789abc")
	})
	waitWorkspace(t, ns, "desk", configured("user-secret-changed-0123456789abc"))
	if err := inCache("user-credentials"); !apierrors.IsNotFound(err) {
		t.Errorf("the user's Secret in the operator's cache after a change: %v, want not found", err)
	}

	// The operator's own Secret, its label removed, is labelled again.
	update(t, ns, "generated-credentials", &corev1.Secret{}, func(s *corev1.Secret) {
		delete(s.Labels, LabelManagedBy)
	})
	eventually(t, "generated-credentials labelled again", func() error {
		s := &corev1.Secret{}
		if err := get(ns, "generated-credentials", s); err != nil {
			return err
		}
		if s.Labels[LabelManagedBy] != FieldManager {
			return fmt.Errorf("labels %v", s.Labels)
		}
		return inCache("generated-credentials")
	})
}
