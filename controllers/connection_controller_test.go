package controllers

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
)

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// connectionIn returns the named connection of w, or an error.
func connectionIn(w *config.Workspace, name string) (*config.Connection, error) {
	c, ok := w.Connection(name)
	if !ok {
		return nil, fmt.Errorf("connection %s not in the configuration (%d connections)", name, len(w.Connections))
	}
	return c, nil
}

// TestConnectionCredentials proves a Connection without a Secret gets a
// generated one it controls, its status reports the client id and the
// time the secret was made, and its Tenant's configuration holds the
// secret's hash, not the secret.
func TestConnectionCredentials(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom"))
	serveTenant(t, ns, "newsroom")
	create(t, newConnection(ns, "cms", "newsroom"))
	c := &v1alpha1.Connection{}
	waitCondition(t, ns, "cms", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if err := hasCondition(c, c.Status.ObservedGeneration, v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsGenerated); err != nil {
		t.Error(err)
	}
	if err := hasCondition(c, c.Status.ObservedGeneration, v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolved); err != nil {
		t.Error(err)
	}
	sec := &corev1.Secret{}
	mustGet(t, ns, "cms-credentials", sec)
	secret := string(sec.Data[v1alpha1.CredentialsClientSecretKey])
	if string(sec.Data[v1alpha1.CredentialsClientIDKey]) != "cms" || !hex64.MatchString(secret) {
		t.Errorf("credentials %q", sec.Data)
	}
	if err := isController(sec, c); err != nil {
		t.Error(err)
	}
	if c.Status.ClientID != "cms" || c.Status.SecretName != "cms-credentials" || c.Status.CredentialsRotatedAt == nil {
		t.Errorf("status %+v", c.Status)
	}
	// Its way to Ready (a Secret made, references resolved, compiled,
	// loaded) is in its status, not in Events.
	noEvents(t, ns, "Connection", "cms", v1alpha1.ReasonCredentialsGenerated, v1alpha1.ReasonResolved, v1alpha1.ReasonNotCompiled, v1alpha1.ReasonTenantNotServing, v1alpha1.ReasonConfigurationLoaded, v1alpha1.ReasonReady)

	w := waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
		cc, err := connectionIn(w, "cms")
		if err != nil {
			return err
		}
		if cc.CredentialsRotatedAt == nil {
			return fmt.Errorf("no credentialsRotatedAt yet")
		}
		return nil
	})
	cc, _ := connectionIn(w, "cms")
	if cc.ClientID != "cms" || cc.SecretHash != config.HashSecret(secret) || !auth.CheckSecret(cc, secret) || !cc.CredentialsRotatedAt.Equal(c.Status.CredentialsRotatedAt.Time) {
		t.Errorf("compiled connection %+v", cc)
	}
	cm := &corev1.ConfigMap{}
	mustGet(t, ns, "newsroom-bus-config", cm)
	if regexp.MustCompile(secret).MatchString(cm.Data[ConfigFile]) {
		t.Error("the client secret is in the ConfigMap")
	}

	t.Run("update", func(t *testing.T) {
		update(t, ns, "cms", c, func(c *v1alpha1.Connection) {
			c.Spec.Active = new(false)
			c.Spec.Limits = &v1alpha1.Limits{RatePerSecond: 3, DailyQuota: 10}
		})
		waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
			cc, err := connectionIn(w, "cms")
			if err != nil {
				return err
			}
			if cc.IsActive() || cc.Limits == nil || cc.Limits.RatePerSecond != 3 || cc.Limits.DailyQuota != 10 {
				return fmt.Errorf("active %v, limits %+v", cc.IsActive(), cc.Limits)
			}
			return nil
		})
		waitCondition(t, ns, "cms", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	})

	t.Run("secret deleted by hand is generated anew", func(t *testing.T) {
		if err := k8s.Delete(context.Background(), sec); err != nil {
			t.Fatal(err)
		}
		eventually(t, "new credentials", func() error {
			s := &corev1.Secret{}
			if err := get(ns, "cms-credentials", s); err != nil {
				return err
			}
			if s.UID == sec.UID || string(s.Data[v1alpha1.CredentialsClientSecretKey]) == secret {
				return errNotYet
			}
			return nil
		})
	})

	t.Run("deleted connection leaves the configuration", func(t *testing.T) {
		if err := k8s.Delete(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
			if _, ok := w.Connection("cms"); ok {
				return fmt.Errorf("cms still configured")
			}
			return nil
		})
	})
}

// TestConnectionReusesSecret proves an existing Secret named by the
// Connection is used as it is: not regenerated, not owned, its hash
// compiled.
func TestConnectionReusesSecret(t *testing.T) {
	ns := newNamespace(t)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wire-credentials"},
		StringData: map[string]string{v1alpha1.CredentialsClientIDKey: "wire-client", v1alpha1.CredentialsClientSecretKey: "wire-dev-secret-0123456789abcdef"},
	})
	create(t, newTenant(ns, "newsroom"))
	serveTenant(t, ns, "newsroom")
	create(t, newConnection(ns, "wire", "newsroom", func(c *v1alpha1.Connection) { c.Spec.Credentials.SecretName = "wire-credentials" }))
	c := &v1alpha1.Connection{}
	waitCondition(t, ns, "wire", c, connectionGen, v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsReused)
	if c.Status.ClientID != "wire-client" || c.Status.CredentialsRotatedAt != nil {
		t.Errorf("status %+v", c.Status)
	}
	sec := &corev1.Secret{}
	mustGet(t, ns, "wire-credentials", sec)
	if string(sec.Data[v1alpha1.CredentialsClientSecretKey]) != "wire-dev-secret-0123456789abcdef" || len(sec.OwnerReferences) != 0 {
		t.Errorf("the existing Secret was changed: %+v", sec)
	}
	waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
		cc, ok := w.ConnectionByClientID("wire-client")
		if !ok || !auth.CheckSecret(cc, "wire-dev-secret-0123456789abcdef") {
			return fmt.Errorf("wire-client not configured with its secret: %+v", w.Connections)
		}
		return nil
	})

	t.Run("a Secret changed by hand is recompiled", func(t *testing.T) {
		update(t, ns, "wire-credentials", &corev1.Secret{}, func(s *corev1.Secret) {
			s.Data[v1alpha1.CredentialsClientSecretKey] = []byte("a-new-secret-set-by-the-platform-team")
		})
		waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
			cc, ok := w.ConnectionByClientID("wire-client")
			if !ok || !auth.CheckSecret(cc, "a-new-secret-set-by-the-platform-team") {
				return fmt.Errorf("hash not updated")
			}
			return nil
		})
	})

	t.Run("a short secret set by hand is refused", func(t *testing.T) {
		update(t, ns, "wire-credentials", &corev1.Secret{}, func(s *corev1.Secret) {
			s.Data[v1alpha1.CredentialsClientSecretKey] = []byte("wire-password")
		})
		c := &v1alpha1.Connection{}
		waitCondition(t, ns, "wire", c, connectionGen, v1alpha1.ConditionCredentialsReady, metav1.ConditionFalse, v1alpha1.ReasonSecretTooShort)
		msg := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCredentialsReady).Message
		if !strings.Contains(msg, "wire-credentials") || !strings.Contains(msg, "13 bytes; at least 32") {
			t.Errorf("message %q", msg)
		}
		if r := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.ReasonSecretTooShort {
			t.Errorf("Ready %+v", r)
		}
		// The bus refuses it whatever hash the configuration holds.
		waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
			cc, ok := w.ConnectionByClientID("wire-client")
			if !ok || cc.SecretHash != config.HashSecret("wire-password") {
				return fmt.Errorf("hash not updated")
			}
			if auth.CheckSecret(cc, "wire-password") {
				return fmt.Errorf("the short secret is accepted")
			}
			return nil
		})
		update(t, ns, "wire-credentials", &corev1.Secret{}, func(s *corev1.Secret) {
			s.Data[v1alpha1.CredentialsClientSecretKey] = []byte("a-long-enough-secret-set-by-the-platform-team")
		})
		waitCondition(t, ns, "wire", c, connectionGen, v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsReused)
	})

	t.Run("a Secret controlled by another Connection is refused", func(t *testing.T) {
		create(t, newConnection(ns, "gen", "newsroom"))
		waitCondition(t, ns, "gen", &v1alpha1.Connection{}, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		create(t, newConnection(ns, "thief", "newsroom", func(c *v1alpha1.Connection) { c.Spec.Credentials.SecretName = "gen-credentials" }))
		waitCondition(t, ns, "thief", &v1alpha1.Connection{}, connectionGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonSecretInUse)
		waitEvent(t, ns, "Connection", "thief", v1alpha1.ReasonSecretInUse)
	})
}

// TestConnectionRotation proves both ways of requesting a rotation (the
// rotate counter and the annotation) replace the secret exactly once each,
// move credentialsRotatedAt forward and put it in the configuration; and
// that removing the annotation or an unrelated change does not rotate.
func TestConnectionRotation(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom"))
	serveTenant(t, ns, "newsroom")
	create(t, newConnection(ns, "cms", "newsroom"))
	c := &v1alpha1.Connection{}
	waitCondition(t, ns, "cms", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	current := func() (string, time.Time) {
		t.Helper()
		sec := &corev1.Secret{}
		mustGet(t, ns, "cms-credentials", sec)
		mustGet(t, ns, "cms", c)
		if c.Status.CredentialsRotatedAt == nil {
			t.Fatal("no credentialsRotatedAt")
		}
		return string(sec.Data[v1alpha1.CredentialsClientSecretKey]), c.Status.CredentialsRotatedAt.Time
	}
	waitRotated := func(oldSecret string, oldAt time.Time) (string, time.Time) {
		t.Helper()
		var secret string
		var at time.Time
		eventually(t, "rotation", func() error {
			sec := &corev1.Secret{}
			if err := get(ns, "cms-credentials", sec); err != nil {
				return err
			}
			if err := get(ns, "cms", c); err != nil {
				return err
			}
			secret = string(sec.Data[v1alpha1.CredentialsClientSecretKey])
			if secret == oldSecret || c.Status.CredentialsRotatedAt == nil || !c.Status.CredentialsRotatedAt.After(oldAt) {
				return errNotYet
			}
			at = c.Status.CredentialsRotatedAt.Time
			return nil
		})
		if !hex64.MatchString(secret) {
			t.Errorf("new secret %q", secret)
		}
		waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
			cc, err := connectionIn(w, "cms")
			if err != nil {
				return err
			}
			if !auth.CheckSecret(cc, secret) || cc.CredentialsRotatedAt == nil || !cc.CredentialsRotatedAt.Equal(at) {
				return fmt.Errorf("compiled %+v, want rotation at %v", cc, at)
			}
			return nil
		})
		return secret, at
	}
	unchanged := func(secret string, at time.Time) {
		t.Helper()
		consistently(t, "no rotation", time.Second, func() error {
			s, a := current()
			if s != secret || !a.Equal(at) {
				return fmt.Errorf("rotated: %v", a)
			}
			return nil
		})
	}

	secret0, at0 := current()
	update(t, ns, "cms", c, func(c *v1alpha1.Connection) { c.Spec.Credentials.Rotate = 1 })
	secret1, at1 := waitRotated(secret0, at0)
	if c.Status.ObservedRotate != 1 {
		t.Errorf("observedRotate %d", c.Status.ObservedRotate)
	}
	waitEvent(t, ns, "Connection", "cms", v1alpha1.ReasonCredentialsRotated)

	update(t, ns, "cms", c, func(c *v1alpha1.Connection) {
		c.Annotations = map[string]string{v1alpha1.AnnotationRotate: "2026-11-30T10:00:00Z"}
	})
	secret2, at2 := waitRotated(secret1, at1)

	update(t, ns, "cms", c, func(c *v1alpha1.Connection) { c.Spec.Limits = &v1alpha1.Limits{Burst: 9} })
	unchanged(secret2, at2)

	update(t, ns, "cms", c, func(c *v1alpha1.Connection) { delete(c.Annotations, v1alpha1.AnnotationRotate) })
	unchanged(secret2, at2)

	update(t, ns, "cms", c, func(c *v1alpha1.Connection) {
		c.Annotations = map[string]string{v1alpha1.AnnotationRotate: "2026-11-30T11:00:00Z"}
	})
	waitRotated(secret2, at2)
}

// TestConnectionDanglingTenant proves a Connection whose Tenant does not
// exist is not Ready, says why with a Warning Event, still gets its
// credentials, and becomes Ready once the Tenant appears.
func TestConnectionDanglingTenant(t *testing.T) {
	ns := newNamespace(t)
	create(t, newConnection(ns, "orphan", "nowhere"))
	c := &v1alpha1.Connection{}
	waitCondition(t, ns, "orphan", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantNotFound)
	if err := hasCondition(c, c.Status.ObservedGeneration, v1alpha1.ConditionResolvedRefs, metav1.ConditionFalse, v1alpha1.ReasonTenantNotFound); err != nil {
		t.Error(err)
	}
	waitEvent(t, ns, "Connection", "orphan", v1alpha1.ReasonTenantNotFound)
	mustGet(t, ns, "orphan-credentials", &corev1.Secret{})

	create(t, newTenant(ns, "nowhere"))
	serveTenant(t, ns, "nowhere")
	waitCondition(t, ns, "orphan", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	waitWorkspace(t, ns, "nowhere", func(w *config.Workspace) error {
		_, err := connectionIn(w, "orphan")
		return err
	})

	t.Run("a missing IAM access key Secret", func(t *testing.T) {
		update(t, ns, "orphan", c, func(c *v1alpha1.Connection) {
			c.Spec.IAM = &v1alpha1.ConnectionIAM{AccessKeySecretRef: v1alpha1.LocalObjectReference{Name: "aws"}, RoleARN: "arn:aws:iam::123456789012:role/cms"}
		})
		waitCondition(t, ns, "orphan", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonSecretNotFound)
		create(t, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "aws"},
			StringData: map[string]string{v1alpha1.IAMAccessKeyIDKey: "AKIDEXAMPLE", v1alpha1.IAMSecretAccessKeyKey: "wJalrXUtnFEMI"},
		})
		waitCondition(t, ns, "orphan", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		w := waitWorkspace(t, ns, "nowhere", func(w *config.Workspace) error {
			cc, err := connectionIn(w, "orphan")
			if err != nil {
				return err
			}
			if cc.IAM == nil || cc.IAM.AccessKeyID != "AKIDEXAMPLE" {
				return fmt.Errorf("iam %+v", cc.IAM)
			}
			return nil
		})
		cc, _ := connectionIn(w, "orphan")
		keyFile := ConfigDir + "/iam.orphan.secretAccessKey"
		if cc.IAM.SecretAccessKey != "" || cc.IAM.SecretAccessKeyFile != keyFile || cc.IAM.RoleARN != "arn:aws:iam::123456789012:role/cms" {
			t.Errorf("iam %+v: the secret access key must stay in a Secret, read from %s", cc.IAM, keyFile)
		}
		// The key is copied into the Tenant's Secret, mounted with the
		// configuration, and follows a change of its own Secret.
		tenantKey := func(want string) func() error {
			return func() error {
				sec := &corev1.Secret{}
				if err := get(ns, "nowhere-bus-signing-key", sec); err != nil {
					return err
				}
				if got := string(sec.Data["iam.orphan.secretAccessKey"]); got != want {
					return fmt.Errorf("tenant secret holds %q, want %q", got, want)
				}
				return nil
			}
		}
		eventually(t, "the key in the Tenant's Secret", tenantKey("wJalrXUtnFEMI"))
		update(t, ns, "aws", &corev1.Secret{}, func(s *corev1.Secret) {
			s.Data[v1alpha1.IAMSecretAccessKeyKey] = []byte("rotated")
		})
		eventually(t, "the rotated key in the Tenant's Secret", tenantKey("rotated"))
	})

	t.Run("the Tenant deleted", func(t *testing.T) {
		if err := k8s.Delete(context.Background(), newTenant(ns, "nowhere")); err != nil {
			t.Fatal(err)
		}
		waitCondition(t, ns, "orphan", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantNotFound)
	})
}
