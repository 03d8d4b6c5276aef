package controllers

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
)

// TestTenantPoliciesTheBusWouldRefuse proves the operator compiles a
// Tenant's Rego modules as the bus does: a module that is not Rego, and a
// module calling http.send, make ConfigurationValid False naming the module
// and the error, and the ConfigMap keeps the last valid configuration.
func TestTenantPoliciesTheBusWouldRefuse(t *testing.T) {
	ns := newNamespace(t)
	module := func(name, rego string) v1alpha1.PolicyModule {
		return v1alpha1.PolicyModule{Name: name, Rego: rego, Rules: []v1alpha1.TenantRule{{ID: "tenant.flag"}}}
	}
	valid := module("desk", `package storybus.tenant.desk

warn contains {"rule": "tenant.flag", "message": "long"} if {
	count(input.message.doc.payload.headline) > 100
}
`)
	create(t, newTenant(ns, "newsroom", func(tn *v1alpha1.Tenant) { tn.Spec.Policies = []v1alpha1.PolicyModule{valid} }))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionTrue, v1alpha1.ReasonCompiled)
	goodHash := tn.Status.ConfigHash
	waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
		if len(w.Policies) != 1 || w.Policies[0].Rego != valid.Rego {
			return fmt.Errorf("policies %+v", w.Policies)
		}
		return nil
	})

	for _, tc := range []struct {
		name   string
		module v1alpha1.PolicyModule
		want   []string
	}{{
		name:   "not Rego",
		module: module("junk", "package x\n\nthis is not rego at all\n"),
		want:   []string{"workspace module junk", "tenant/junk.rego:3", "rego_parse_error"},
	}, {
		name: "http.send",
		module: module("exfil", `package storybus.tenant.exfil

warn contains {"rule": "tenant.flag", "message": "sent"} if {
	http.send({"method": "POST", "url": "http://127.0.0.1:1/", "body": input.message.doc})
}
`),
		want: []string{"workspace module exfil, line 4: built-in http.send is not allowed"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			update(t, ns, "newsroom", tn, func(tn *v1alpha1.Tenant) {
				tn.Spec.Policies = []v1alpha1.PolicyModule{valid, tc.module}
			})
			waitCondition(t, ns, "newsroom", tn, tenantGen, v1alpha1.ConditionConfigurationValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidConfiguration)
			msg := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.ConditionConfigurationValid).Message
			for _, want := range tc.want {
				if !strings.Contains(msg, want) {
					t.Errorf("ConfigurationValid message %q does not say %q", msg, want)
				}
			}
			w, cm, err := workspaceOf(ns, "newsroom")
			if err != nil {
				t.Fatal(err)
			}
			if cm.Annotations[v1alpha1.AnnotationConfigHash] != goodHash || len(w.Policies) != 1 || w.Policies[0].Name != "desk" {
				t.Errorf("the refused configuration replaced the last valid one: %+v", w.Policies)
			}
		})
	}
}

// TestTenantSandboxReachesTheConfiguration proves spec.sandbox is rendered
// into the workspace configuration the bus loads, and leaves it when the
// Tenant stops being a sandbox.
func TestTenantSandboxReachesTheConfiguration(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "newsroom", func(tn *v1alpha1.Tenant) { tn.Spec.Sandbox = true }))
	waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
		if !w.Sandbox {
			return fmt.Errorf("sandbox %v", w.Sandbox)
		}
		return nil
	})
	update(t, ns, "newsroom", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.Sandbox = false })
	waitWorkspace(t, ns, "newsroom", func(w *config.Workspace) error {
		if w.Sandbox {
			return fmt.Errorf("still a sandbox")
		}
		return nil
	})
}
