package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/config/samples"
)

// TestDayTwoStory walks, in order, what a platform team does with the
// operator after the first install, as docs/operator.md's "A day-2 walk"
// tells it: apply the samples, break and mend a policy while a Connection
// is added, rotate credentials, edit a Grant, grow the volume, and delete
// the Tenant under both deletion policies. Every step waits for what the
// user would see in `kubectl get` and `kubectl describe`.
func TestDayTwoStory(t *testing.T) {
	ns := newNamespace(t)
	// The cluster's StorageClass allows expansion (the bus volume's claim
	// names it, as a default class would).
	class := storageClass(t, ns+"-expandable", true)
	tn := &v1alpha1.Tenant{}

	inForce := func(t *testing.T) {
		t.Helper()
		waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		for _, name := range []string{"cms", "wire"} {
			c := &v1alpha1.Connection{}
			waitCondition(t, ns, name, c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
			if err := hasCondition(c, c.Status.ObservedGeneration, v1alpha1.ConditionInForce, metav1.ConditionTrue, v1alpha1.ReasonConfigurationLoaded); err != nil {
				t.Error(err)
			}
		}
		for _, name := range []string{"cms-publish", "cms-consume", "wire"} {
			g := &v1alpha1.Grant{}
			waitCondition(t, ns, name, g, grantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
			if err := hasCondition(g, g.Status.ObservedGeneration, v1alpha1.ConditionInForce, metav1.ConditionTrue, v1alpha1.ReasonConfigurationLoaded); err != nil {
				t.Error(err)
			}
		}
		waitCondition(t, ns, "newsroom", &v1alpha1.OwnershipPolicy{}, policyGen, v1alpha1.ConditionInForce, metav1.ConditionTrue, v1alpha1.ReasonConfigurationLoaded)
		mustGet(t, ns, "newsroom", tn)
		_, cm, err := workspaceOf(ns, "newsroom")
		if err != nil {
			t.Fatal(err)
		}
		if h := cm.Annotations[v1alpha1.AnnotationConfigHash]; tn.Status.ConfigHash != h || tn.Status.LoadedConfigHash != h {
			t.Errorf("Tenant configHash %s, loadedConfigHash %s, ConfigMap %s", tn.Status.ConfigHash, tn.Status.LoadedConfigHash, h)
		}
	}

	// Apply the samples (not a subtest: the fake bus pods serve until the
	// whole walk ends). No pod has loaded the configuration yet: nothing
	// claims to be in force.
	applySamples(t, ns)
	waitCondition(t, ns, "cms", &v1alpha1.Connection{}, connectionGen, v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonTenantNotServing)
	waitCondition(t, ns, "cms-publish", &v1alpha1.Grant{}, grantGen, v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonTenantNotServing)
	boundClaim(t, ns, "newsroom", class, "10Gi")
	fake := serveTenant(t, ns, "newsroom")
	t.Run("apply the samples", inForce)

	const junk = "package storybus.tenant.junk\n\nthis is not rego at all\n"
	var frozen string
	t.Run("break a policy", func(t *testing.T) {
		mustGet(t, ns, "newsroom", tn)
		frozen = tn.Status.ConfigHash
		update(t, ns, "newsroom", tn, func(tn *v1alpha1.Tenant) {
			tn.Spec.Policies = []v1alpha1.PolicyModule{{Name: "junk", Rego: junk, Rules: []v1alpha1.TenantRule{{ID: "tenant.flag"}}}}
		})
		waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidConfiguration)
		if msg := findCondition(tn.Status.Conditions, v1alpha1.ConditionConfigurationValid).Message; !strings.Contains(msg, "workspace module junk") {
			t.Errorf("ConfigurationValid %q does not name the module", msg)
		}
		_, cm, err := workspaceOf(ns, "newsroom")
		if err != nil {
			t.Fatal(err)
		}
		if cm.Annotations[v1alpha1.AnnotationConfigHash] != frozen || tn.Status.ConfigHash != frozen {
			t.Errorf("the refused configuration replaced %s: ConfigMap %s, status %s", frozen, cm.Annotations[v1alpha1.AnnotationConfigHash], tn.Status.ConfigHash)
		}
	})

	t.Run("add a Connection while frozen", func(t *testing.T) {
		create(t, newConnection(ns, "desk", "newsroom"))
		c := &v1alpha1.Connection{}
		waitCondition(t, ns, "desk", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantConfigurationInvalid)
		if err := hasCondition(c, c.Status.ObservedGeneration, v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonTenantConfigurationInvalid); err != nil {
			t.Error(err)
		}
		if msg := findCondition(c.Status.Conditions, v1alpha1.ConditionInForce).Message; !strings.Contains(msg, "junk") {
			t.Errorf("InForce %q does not name the Tenant's problem", msg)
		}
		if err := hasCondition(c, c.Status.ObservedGeneration, v1alpha1.ConditionCredentialsReady, metav1.ConditionTrue, v1alpha1.ReasonCredentialsGenerated); err != nil {
			t.Errorf("the frozen Tenant kept the Connection from its credentials: %v", err)
		}
		// What was in force stays in force.
		waitCondition(t, ns, "cms", &v1alpha1.Connection{}, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		w, _, err := workspaceOf(ns, "newsroom")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := w.Connection("desk"); ok {
			t.Error("the frozen configuration holds the new Connection")
		}
	})

	t.Run("mend the policy", func(t *testing.T) {
		fake.pin(frozen) // the pods have not reloaded yet
		update(t, ns, "newsroom", tn, func(tn *v1alpha1.Tenant) { tn.Spec.Policies = nil })
		waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
		waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error { _, err := connectionIn(w, "desk"); return err })
		c := &v1alpha1.Connection{}
		waitCondition(t, ns, "desk", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantNotServing)
		fake.pin("") // they reload
		waitCondition(t, ns, "desk", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		inForce(t)
	})

	t.Run("rotate credentials", func(t *testing.T) {
		mustGet(t, ns, "newsroom", tn)
		before := tn.Status.ConfigGeneration
		c := &v1alpha1.Connection{}
		update(t, ns, "cms", c, func(c *v1alpha1.Connection) {
			c.Annotations = map[string]string{v1alpha1.AnnotationRotate: "2026-12-01T09:00:00Z"}
		})
		var secret string
		eventually(t, "the rotated secret in force", func() error {
			sec := &corev1.Secret{}
			if err := get(ns, "cms-credentials", sec); err != nil {
				return err
			}
			if secret = string(sec.Data[v1alpha1.CredentialsClientSecretKey]); secret == samples.CMSSecret {
				return errNotYet
			}
			if err := get(ns, "cms", c); err != nil {
				return err
			}
			if c.Status.CredentialsRotatedAt == nil {
				return errNotYet
			}
			return hasCondition(c, c.Status.ObservedGeneration, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		})
		waitEvent(t, ns, "Connection", "cms", v1alpha1.ReasonCredentialsRotated)
		waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
			cc, err := connectionIn(w, "cms")
			if err != nil {
				return err
			}
			if !auth.CheckSecret(cc, secret) || auth.CheckSecret(cc, samples.CMSSecret) {
				return fmt.Errorf("compiled %+v does not hold the new secret alone", cc)
			}
			return nil
		})
		consistently(t, "one configuration for one rotation", 2*time.Second, func() error {
			if err := get(ns, "newsroom", tn); err != nil {
				return err
			}
			if tn.Status.ConfigGeneration != before+1 {
				return fmt.Errorf("configuration generation %d, want %d", tn.Status.ConfigGeneration, before+1)
			}
			return nil
		})
	})

	t.Run("edit a Grant", func(t *testing.T) {
		mustGet(t, ns, "newsroom", tn)
		fake.pin(tn.Status.ConfigHash)
		g := &v1alpha1.Grant{}
		update(t, ns, "wire", g, func(g *v1alpha1.Grant) {
			g.Spec.Consume.Families = []string{"story-context", "story-event"}
		})
		waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
			cc, err := connectionIn(w, "wire")
			if err != nil {
				return err
			}
			if !slices.Contains(cc.Grant.Consume.Families, "story-event") {
				return fmt.Errorf("families %v", cc.Grant.Consume.Families)
			}
			return nil
		})
		waitCondition(t, ns, "wire", g, grantGen, v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonTenantNotServing)
		fake.pin("")
		waitCondition(t, ns, "wire", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		inForce(t)
	})

	t.Run("grow the volume", func(t *testing.T) {
		growTo(t, ns, "newsroom", "20Gi")
		pvc := &corev1.PersistentVolumeClaim{}
		eventually(t, "volume claim asks 20Gi", func() error {
			if err := get(ns, "data-newsroom-bus-0", pvc); err != nil {
				return err
			}
			if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "20Gi" {
				return fmt.Errorf("volume claim asks %s", got.String())
			}
			return nil
		})
		waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionVolumeExpansion, metav1.ConditionFalse, v1alpha1.ReasonVolumeExpanding)
		// The storage driver and the kubelet do their part.
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]}
		if err := k8s.Status().Update(context.Background(), pvc); err != nil {
			t.Fatal(err)
		}
		waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionVolumeExpansion, metav1.ConditionTrue, v1alpha1.ReasonVolumesExpanded)
		inForce(t)
	})

	t.Run("delete with deletionPolicy retain", func(t *testing.T) {
		mustGet(t, ns, "newsroom", tn)
		if tn.Spec.DeletionPolicy != v1alpha1.DeletionPolicyRetain {
			t.Fatalf("the sample's deletionPolicy is %q", tn.Spec.DeletionPolicy)
		}
		if err := k8s.Delete(context.Background(), tn); err != nil {
			t.Fatal(err)
		}
		eventually(t, "tenant gone", func() error { return gone(ns, "newsroom", &v1alpha1.Tenant{}) })
		waitEvent(t, ns, "Tenant", "newsroom", "VolumesRetained")
		pvc := &corev1.PersistentVolumeClaim{}
		mustGet(t, ns, "data-newsroom-bus-0", pvc)
		if !pvc.DeletionTimestamp.IsZero() {
			t.Error("retain deleted the bus volume")
		}
		// The Connections stay, and say their Tenant is missing.
		waitCondition(t, ns, "cms", &v1alpha1.Connection{}, connectionGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantNotFound)
	})

	t.Run("delete with deletionPolicy delete", func(t *testing.T) {
		create(t, newTenant(ns, "newsroom", embeddedOn(class, "20Gi"), func(tn *v1alpha1.Tenant) {
			tn.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete
		}))
		eventually(t, "the operator's finalizer", func() error {
			if err := get(ns, "newsroom", tn); err != nil {
				return err
			}
			if !slices.Contains(tn.Finalizers, v1alpha1.Finalizer) {
				return errNotYet
			}
			return nil
		})
		if err := k8s.Delete(context.Background(), tn); err != nil {
			t.Fatal(err)
		}
		eventually(t, "tenant gone", func() error { return gone(ns, "newsroom", &v1alpha1.Tenant{}) })
		waitEvent(t, ns, "Tenant", "newsroom", "VolumesDeleted")
		eventually(t, "bus volume deleted", func() error {
			p := &corev1.PersistentVolumeClaim{}
			if err := get(ns, "data-newsroom-bus-0", p); err == nil && p.DeletionTimestamp.IsZero() {
				return errNotYet
			}
			return nil
		})
	})
}
