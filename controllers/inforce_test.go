package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
)

// TestReadyMeansInForce proves a Connection and its Grant are Ready only
// once the configuration the bus pods report having loaded contains them:
// not while the pods still serve an older one, and not while a bad
// OwnershipPolicy freezes the Tenant's configuration; the bad policy
// itself never claims to be in force.
func TestReadyMeansInForce(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom"))
	fake := serveTenant(t, ns, "newsroom")
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if tn.Status.LoadedConfigHash != tn.Status.ConfigHash || tn.Status.ConfigGeneration < 1 {
		t.Fatalf("status %+v", tn.Status)
	}

	t.Run("pods that have not reloaded", func(t *testing.T) {
		fake.pin(tn.Status.ConfigHash) // the pods keep serving this one
		create(t, newConnection(ns, "cms", "newsroom"))
		create(t, newGrant(ns, "cms-publish", "cms", &v1alpha1.PublishGrant{SystemIDs: []string{"cms"}, MessageTypes: []string{"*"}}, nil))
		c, g := &v1alpha1.Connection{}, &v1alpha1.Grant{}
		waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error { _, err := connectionIn(w, "cms"); return err })
		waitCondition(t, ns, "cms", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantNotServing)
		waitCondition(t, ns, "cms-publish", g, grantGen, v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonTenantNotServing)
		waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConfigurationNotLoaded)
		if tn.Status.LoadedConfigHash == tn.Status.ConfigHash {
			t.Errorf("loaded %s while the pods serve another", tn.Status.LoadedConfigHash)
		}

		fake.pin("") // they reload
		waitCondition(t, ns, "cms", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		waitCondition(t, ns, "cms-publish", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		if err := hasCondition(c, c.Status.ObservedGeneration, v1alpha1.ConditionInForce, metav1.ConditionTrue, v1alpha1.ReasonConfigurationLoaded); err != nil {
			t.Error(err)
		}
	})

	t.Run("a frozen configuration", func(t *testing.T) {
		create(t, newPolicy(ns, "broken", "newsroom", func(p *v1alpha1.OwnershipPolicy) {
			p.Spec.Owners = []v1alpha1.OwnerRule{{StoryIDPattern: "story-(", SystemID: "cms"}}
		}))
		waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidConfiguration)
		frozen := tn.Status.ConfigHash

		create(t, newConnection(ns, "wire", "newsroom"))
		create(t, newGrant(ns, "wire-publish", "wire", &v1alpha1.PublishGrant{SystemIDs: []string{"wire"}, MessageTypes: []string{"*"}}, nil))
		c, g, p := &v1alpha1.Connection{}, &v1alpha1.Grant{}, &v1alpha1.OwnershipPolicy{}
		waitCondition(t, ns, "wire", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantConfigurationInvalid)
		waitCondition(t, ns, "wire-publish", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantConfigurationInvalid)
		if ready := findCondition(g.Status.Conditions, v1alpha1.ConditionReady); !strings.Contains(ready.Message, "story-(") {
			t.Errorf("the Grant does not say what is wrong with its Tenant: %q", ready.Message)
		}
		waitCondition(t, ns, "broken", p, policyGen, v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonTenantConfigurationInvalid)
		// What was in force stays in force, and says so.
		waitCondition(t, ns, "cms-publish", &v1alpha1.Grant{}, grantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		w, _, err := workspaceOf(ns, "newsroom")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := w.Connection("wire"); ok {
			t.Fatal("the frozen configuration holds the new Connection")
		}
		mustGet(t, ns, "newsroom", tn)
		if tn.Status.ConfigHash != frozen || tn.Status.LoadedConfigHash != frozen {
			t.Errorf("status %+v", tn.Status)
		}

		if err := k8s.Delete(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		waitCondition(t, ns, "wire", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
		waitCondition(t, ns, "wire-publish", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	})
}

// TestNoBusBeforeAValidConfiguration proves a Tenant whose configuration
// has never been valid gets no StatefulSet (its pods would wait for a
// ConfigMap that does not exist), and a message that says so; once the
// configuration is valid, the bus is created.
func TestNoBusBeforeAValidConfiguration(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "early", func(tn *v1alpha1.Tenant) {
		tn.Spec.Firewall = &v1alpha1.Firewall{BlockedPatterns: []string{"("}}
	}))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "early", tn, tenantGen, v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonAwaitingConfiguration)
	valid := findCondition(tn.Status.Conditions, v1alpha1.ConditionConfigurationValid)
	if valid == nil || valid.Status != metav1.ConditionFalse || strings.Contains(valid.Message, "keep") || !strings.Contains(valid.Message, "no valid configuration") {
		t.Errorf("ConfigurationValid %+v", valid)
	}
	consistently(t, "no StatefulSet", 2*time.Second, func() error {
		if err := gone(ns, "early-bus", &appsv1.StatefulSet{}); err != nil {
			return err
		}
		return gone(ns, "early-bus-config", &corev1.ConfigMap{})
	})

	update(t, ns, "early", tn, func(tn *v1alpha1.Tenant) { tn.Spec.Firewall.BlockedPatterns = []string{"secret"} })
	eventually(t, "the StatefulSet", func() error { return get(ns, "early-bus", &appsv1.StatefulSet{}) })
	waitCondition(t, ns, "early", tn, tenantGen, v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonReplicasNotReady)
}

// TestTenantColumnsPrintZero proves the numbers of the Tenant's printer
// columns are 0, not missing, before any pod is ready.
func TestTenantColumnsPrintZero(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "idle"))
	waitCondition(t, ns, "idle", &v1alpha1.Tenant{}, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind("Tenant")
	mustGet(t, ns, "idle", u)
	for _, f := range []string{"readyReplicas", "connections"} {
		v, found, err := unstructured.NestedInt64(u.Object, "status", f)
		if err != nil || !found || v != 0 {
			t.Errorf("status.%s = %v (found %v, %v), want 0", f, v, found, err)
		}
	}
}

// TestRotationCompilesOnce proves one rotation makes one new configuration:
// the new secret's hash and the rotation time that revokes earlier tokens
// arrive together, both read from the credentials Secret.
func TestRotationCompilesOnce(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom"))
	serveTenant(t, ns, "newsroom")
	create(t, newConnection(ns, "cms", "newsroom"))
	c := &v1alpha1.Connection{}
	waitCondition(t, ns, "cms", c, connectionGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	tn := &v1alpha1.Tenant{}
	mustGet(t, ns, "newsroom", tn)
	before := tn.Status.ConfigGeneration
	rotatedBefore := c.Status.CredentialsRotatedAt

	update(t, ns, "cms", c, func(c *v1alpha1.Connection) { c.Spec.Credentials.Rotate++ })
	var secret string
	eventually(t, "the rotated secret in force", func() error {
		if err := get(ns, "cms", c); err != nil {
			return err
		}
		if c.Status.CredentialsRotatedAt.Equal(rotatedBefore) {
			return errNotYet
		}
		if err := hasCondition(c, c.Status.ObservedGeneration, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady); err != nil {
			return err
		}
		sec := &corev1.Secret{}
		if err := get(ns, "cms-credentials", sec); err != nil {
			return err
		}
		secret = string(sec.Data[v1alpha1.CredentialsClientSecretKey])
		return nil
	})
	w, _, err := workspaceOf(ns, "newsroom")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := connectionIn(w, "cms")
	if err != nil {
		t.Fatal(err)
	}
	if !auth.CheckSecret(cc, secret) || cc.CredentialsRotatedAt == nil || !cc.CredentialsRotatedAt.Equal(c.Status.CredentialsRotatedAt.Time) {
		t.Fatalf("configuration %+v, status rotated at %v", cc, c.Status.CredentialsRotatedAt)
	}
	consistently(t, "one configuration for one rotation", 2*time.Second, func() error {
		if err := get(ns, "newsroom", tn); err != nil {
			return err
		}
		if tn.Status.ConfigGeneration != before+1 {
			return fmt.Errorf("configuration generation %d, want %d", tn.Status.ConfigGeneration, before+1)
		}
		return nil
	})
}
