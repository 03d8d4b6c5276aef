package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEffectiveValues(t *testing.T) {
	tn := &Tenant{ObjectMeta: metav1.ObjectMeta{Name: "newsroom"}}
	if tn.EffectiveWorkspaceID() != "newsroom" || tn.EffectiveReplicas() != 1 || tn.EffectiveDeletionPolicy() != DeletionPolicyRetain {
		t.Errorf("defaults: %s %d %s", tn.EffectiveWorkspaceID(), tn.EffectiveReplicas(), tn.EffectiveDeletionPolicy())
	}
	tn.Spec.WorkspaceID, tn.Spec.Replicas, tn.Spec.DeletionPolicy = "ws", new(int32(0)), DeletionPolicyDelete
	if tn.EffectiveWorkspaceID() != "ws" || tn.EffectiveReplicas() != 0 || tn.EffectiveDeletionPolicy() != DeletionPolicyDelete {
		t.Errorf("set: %s %d %s", tn.EffectiveWorkspaceID(), tn.EffectiveReplicas(), tn.EffectiveDeletionPolicy())
	}
	c := &Connection{ObjectMeta: metav1.ObjectMeta{Name: "cms"}}
	if c.CredentialsSecretName() != "cms-credentials" || !c.IsActive() {
		t.Errorf("connection defaults: %s %v", c.CredentialsSecretName(), c.IsActive())
	}
	c.Spec.Credentials.SecretName, c.Spec.Active = "mine", new(false)
	if c.CredentialsSecretName() != "mine" || c.IsActive() {
		t.Errorf("connection set: %s %v", c.CredentialsSecretName(), c.IsActive())
	}
}

// TestDeepCopyIsDeep guards the generated deepcopy code: a copy shares no
// memory with its original.
func TestDeepCopyIsDeep(t *testing.T) {
	tn := &Tenant{Spec: TenantSpec{Replicas: new(int32(1)), Policies: []PolicyModule{{Name: "a", Rules: []TenantRule{{ID: "tenant.a"}}}}}}
	cp := tn.DeepCopy()
	*cp.Spec.Replicas = 2
	cp.Spec.Policies[0].Rules[0].ID = "tenant.b"
	if *tn.Spec.Replicas != 1 || tn.Spec.Policies[0].Rules[0].ID != "tenant.a" {
		t.Error("DeepCopy shares memory")
	}
}
