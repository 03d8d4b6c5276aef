package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
)

// TestOwnershipPolicy proves a policy is folded into its Tenant's
// configuration, follows updates and leaves with deletion.
func TestOwnershipPolicy(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom"))
	serveTenant(t, ns, "newsroom")
	create(t, newPolicy(ns, "desk", "newsroom", func(p *v1alpha1.OwnershipPolicy) {
		p.Spec.NotOwner = v1alpha1.NotOwnerRefuse
		p.Spec.Owners = []v1alpha1.OwnerRule{{StoryIDPattern: "wire-.*", SystemID: "wire"}}
		p.Spec.Handoffs = []v1alpha1.Handoff{{StoryID: "story-1", ToSystemID: "cms"}}
	}))
	p := &v1alpha1.OwnershipPolicy{}
	waitCondition(t, ns, "desk", p, policyGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	for _, typ := range []string{v1alpha1.ConditionAccepted, v1alpha1.ConditionResolvedRefs} {
		if c := findCondition(p.Status.Conditions, typ); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("%s: %+v", typ, c)
		}
	}
	waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
		o := w.Ownership
		if o.NotOwner != config.NotOwnerRefuse || len(o.Owners) != 1 || o.Owners[0].SystemID != "wire" || len(o.Handoffs) != 1 {
			return fmt.Errorf("ownership %+v", o)
		}
		return nil
	})

	update(t, ns, "desk", p, func(p *v1alpha1.OwnershipPolicy) { p.Spec.NotOwner = v1alpha1.NotOwnerTolerate; p.Spec.Handoffs = nil })
	waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
		if w.Ownership.NotOwner != config.NotOwnerTolerate || len(w.Ownership.Handoffs) != 0 {
			return fmt.Errorf("ownership %+v", w.Ownership)
		}
		return nil
	})
	waitCondition(t, ns, "desk", p, policyGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	if err := k8s.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
		if len(w.Ownership.Owners) != 0 {
			return fmt.Errorf("ownership %+v", w.Ownership)
		}
		return nil
	})
}

// TestOwnershipPolicyInvalid proves a pattern that does not compile makes
// the policy not Accepted and the Tenant's configuration invalid, while
// the bus keeps the last valid configuration; fixing it recovers both.
func TestOwnershipPolicyInvalid(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom"))
	serveTenant(t, ns, "newsroom")
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
	goodHash := tn.Status.ConfigHash

	create(t, newPolicy(ns, "broken", "newsroom", func(p *v1alpha1.OwnershipPolicy) {
		p.Spec.Owners = []v1alpha1.OwnerRule{{StoryIDPattern: "story-(", SystemID: "cms"}}
	}))
	p := &v1alpha1.OwnershipPolicy{}
	waitCondition(t, ns, "broken", p, policyGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	waitEvent(t, ns, "OwnershipPolicy", "broken", v1alpha1.ReasonInvalidSpec)
	waitCondition(t, ns, "broken", p, policyGen, v1alpha1.ConditionInForce, metav1.ConditionFalse, v1alpha1.ReasonTenantConfigurationInvalid)
	for _, c := range p.Status.Conditions {
		if strings.Contains(c.Message, "folded") {
			t.Errorf("the bad policy claims it was folded in: %+v", c)
		}
	}
	waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidConfiguration)
	waitEvent(t, ns, "Tenant", "newsroom", v1alpha1.ReasonInvalidConfiguration)
	_, cm, err := workspaceOf(ns, "newsroom")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Annotations[v1alpha1.AnnotationConfigHash] != goodHash {
		t.Error("an invalid configuration replaced the last valid one")
	}

	update(t, ns, "broken", p, func(p *v1alpha1.OwnershipPolicy) { p.Spec.Owners[0].StoryIDPattern = "story-.*" })
	waitCondition(t, ns, "broken", p, policyGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
	if tn.Status.ConfigHash == goodHash {
		t.Error("the fixed policy is not in the configuration")
	}
}

// TestOwnershipPolicyDanglingTenant proves a policy for a missing Tenant is
// not Ready and says so with a Warning Event.
func TestOwnershipPolicyDanglingTenant(t *testing.T) {
	ns := newNamespace(t)
	create(t, newPolicy(ns, "lost", "ghost"))
	p := &v1alpha1.OwnershipPolicy{}
	waitCondition(t, ns, "lost", p, policyGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantNotFound)
	waitEvent(t, ns, "OwnershipPolicy", "lost", v1alpha1.ReasonTenantNotFound)
	create(t, newTenant(ns, "ghost"))
	serveTenant(t, ns, "ghost")
	waitCondition(t, ns, "lost", p, policyGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
}
