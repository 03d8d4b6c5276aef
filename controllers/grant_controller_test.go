package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
)

// TestGrant proves a Grant is folded into its Connection's entry of the
// Tenant's configuration, follows updates, leaves with deletion, and
// reports its Tenant.
func TestGrant(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom"))
	serveTenant(t, ns, "newsroom")
	create(t, newConnection(ns, "cms", "newsroom"))
	create(t, newGrant(ns, "cms-publish", "cms", &v1alpha1.PublishGrant{SystemIDs: []string{"cms"}, MessageTypes: []string{"story.context"}}, nil))
	create(t, newGrant(ns, "cms-read", "cms", nil, &v1alpha1.ConsumeGrant{Families: []string{"*"}}))
	g := &v1alpha1.Grant{}
	waitCondition(t, ns, "cms-publish", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	if err := hasCondition(g, g.Status.ObservedGeneration, v1alpha1.ConditionResolvedRefs, metav1.ConditionTrue, v1alpha1.ReasonResolved); err != nil {
		t.Error(err)
	}
	if g.Status.Tenant != "newsroom" {
		t.Errorf("status.tenant %q", g.Status.Tenant)
	}
	grantOf := func(want string) func(*config.Workspace) error {
		return func(w *config.Workspace) error {
			c, err := connectionIn(w, "cms")
			if err != nil {
				return err
			}
			got := strings.Join(c.Grant.Publish.SystemIDs, ",") + "|" + strings.Join(c.Grant.Publish.MessageTypes, ",") + "|" + strings.Join(c.Grant.Consume.Families, ",")
			if got != want {
				return fmt.Errorf("grant %s, want %s", got, want)
			}
			return nil
		}
	}
	waitWorkspace(t, ns, "newsroom", grantOf("cms|story.context|*"))

	update(t, ns, "cms-publish", g, func(g *v1alpha1.Grant) {
		g.Spec.Publish.MessageTypes = append(g.Spec.Publish.MessageTypes, "story.event")
	})
	waitWorkspace(t, ns, "newsroom", grantOf("cms|story.context,story.event|*"))
	waitCondition(t, ns, "cms-publish", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	if err := k8s.Delete(context.Background(), newGrant(ns, "cms-read", "cms", nil, nil)); err != nil {
		t.Fatal(err)
	}
	waitWorkspace(t, ns, "newsroom", grantOf("cms|story.context,story.event|"))
}

// TestGrantDanglingReferences proves a Grant whose Connection, or whose
// Connection's Tenant, is missing is not Ready, says which with a Warning
// Event, and recovers when the objects appear.
func TestGrantDanglingReferences(t *testing.T) {
	ns := newNamespace(t)
	create(t, newGrant(ns, "early", "wire", &v1alpha1.PublishGrant{SystemIDs: []string{"wire"}, MessageTypes: []string{"*"}}, nil))
	g := &v1alpha1.Grant{}
	waitCondition(t, ns, "early", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConnectionNotFound)
	waitEvent(t, ns, "Grant", "early", v1alpha1.ReasonConnectionNotFound)

	create(t, newConnection(ns, "wire", "agency"))
	waitCondition(t, ns, "early", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTenantNotFound)
	waitEvent(t, ns, "Grant", "early", v1alpha1.ReasonTenantNotFound)
	if g.Status.Tenant != "agency" {
		t.Errorf("status.tenant %q", g.Status.Tenant)
	}

	create(t, newTenant(ns, "agency"))
	serveTenant(t, ns, "agency")
	waitCondition(t, ns, "early", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)
	waitWorkspace(t, ns, "agency", func(w *config.Workspace) error {
		c, err := connectionIn(w, "wire")
		if err != nil {
			return err
		}
		if !slices.Equal(c.Grant.Publish.MessageTypes, []string{"*"}) {
			return fmt.Errorf("grant %+v", c.Grant)
		}
		return nil
	})

	if err := k8s.Delete(context.Background(), newConnection(ns, "wire", "agency")); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ns, "early", g, grantGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConnectionNotFound)
}
