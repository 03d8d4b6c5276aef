package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/config/samples"
)

// TestSamplesApplyInOrder proves config/samples, rendered by kustomize as
// `kubectl apply -k` does, puts the credentials Secrets first, and that the
// operator then uses them as supplied: it neither owns them nor replaces
// their secrets, and no generated object carries them.
func TestSamplesApplyInOrder(t *testing.T) {
	objs := renderSamples(t)
	if len(objs) == 0 || objs[0].GetKind() != "Secret" || objs[1].GetKind() != "Secret" {
		t.Fatalf("rendered order: the Secrets come first, got %s first", objs[0].GetKind())
	}
	ns := newNamespace(t)
	applySamples(t, ns)
	c := &v1alpha1.Connection{}
	waitCondition(t, ns, "cms", c, connectionGen, v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsReused)
	sec := &corev1.Secret{}
	mustGet(t, ns, "cms-credentials", sec)
	if len(sec.OwnerReferences) != 0 || string(sec.Data[v1alpha1.CredentialsClientSecretKey]) != samples.CMSSecret {
		t.Errorf("the supplied Secret: owners %+v, secret replaced %v", sec.OwnerReferences, string(sec.Data[v1alpha1.CredentialsClientSecretKey]) != samples.CMSSecret)
	}
}

// TestCredentialsChangedOutsideARotation proves a generated Secret whose
// client secret is replaced by hand is reported and treated as a rotation
// (earlier tokens revoked), and that one a user applies over (kubectl's
// last-applied annotation) is released: no longer owned, so never deleted
// with the Connection.
func TestCredentialsChangedOutsideARotation(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom"))
	create(t, newConnection(ns, "cms", "newsroom"))
	c := &v1alpha1.Connection{}
	waitCondition(t, ns, "cms", c, connectionGen, v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsGenerated)
	eventually(t, "rotated-at", func() error {
		if err := get(ns, "cms", c); err != nil {
			return err
		}
		if c.Status.CredentialsRotatedAt == nil {
			return errNotYet
		}
		return nil
	})
	first := c.Status.CredentialsRotatedAt.DeepCopy()

	update(t, ns, "cms-credentials", &corev1.Secret{}, func(s *corev1.Secret) {
		s.Data[v1alpha1.CredentialsClientSecretKey] = []byte("changed-by-hand-0123456789abcdef-0123")
	})
	waitEvent(t, ns, "Connection", "cms", v1alpha1.ReasonCredentialsChanged)
	eventually(t, "a new rotation time in the configuration", func() error {
		if err := get(ns, "cms", c); err != nil {
			return err
		}
		if c.Status.CredentialsRotatedAt == nil || !c.Status.CredentialsRotatedAt.After(first.Time) {
			return errNotYet
		}
		w, _, err := workspaceOf(ns, "newsroom")
		if err != nil {
			return err
		}
		cc, err := connectionIn(w, "cms")
		if err != nil {
			return err
		}
		if !auth.CheckSecret(cc, "changed-by-hand-0123456789abcdef-0123") || cc.CredentialsRotatedAt == nil || !cc.CredentialsRotatedAt.Equal(c.Status.CredentialsRotatedAt.Time) {
			return errNotYet
		}
		return nil
	})

	// kubectl apply over the generated Secret (client-side apply keeps what
	// it applied in an annotation).
	update(t, ns, "cms-credentials", &corev1.Secret{}, func(s *corev1.Secret) {
		s.Annotations[lastAppliedAnnotation] = `{"apiVersion":"v1","kind":"Secret"}`
		s.Data[v1alpha1.CredentialsClientSecretKey] = []byte(samples.CMSSecret)
	})
	waitEvent(t, ns, "Connection", "cms", v1alpha1.ReasonSecretReleased)
	waitCondition(t, ns, "cms", c, connectionGen, v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsReused)
	sec := &corev1.Secret{}
	mustGet(t, ns, "cms-credentials", sec)
	if len(sec.OwnerReferences) != 0 {
		t.Errorf("a Secret a user applied is still owned: %+v", sec.OwnerReferences)
	}
	if sec.Annotations[v1alpha1.AnnotationSecretHash] != config.HashSecret(samples.CMSSecret) {
		t.Errorf("secret hash %q", sec.Annotations[v1alpha1.AnnotationSecretHash])
	}
}
