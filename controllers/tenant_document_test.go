package controllers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
)

// TestWorkspaceDocumentReadBackFromTheConfigMap: a workspace compiled
// again as it was is given the document its Tenant's ConfigMap holds,
// without a copy kept in memory; a ConfigMap that does not hold that
// document (none yet, one naming another hash, one changed by hand under
// its configHash line) or a workspace that changed has the workspace
// converted again.
func TestWorkspaceDocumentReadBackFromTheConfigMap(t *testing.T) {
	ctx := context.Background()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	tenant := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: "desk", Name: "document-read-back"}}
	key := client.ObjectKeyFromObject(tenant)
	t.Cleanup(func() {
		compiled.mu.Lock()
		delete(compiled.last, key)
		compiled.mu.Unlock()
	})
	w := &config.Workspace{ID: "document-read-back", SigningKeyFile: "/etc/storybus/signing-key"}
	// converted is w's document as a conversion makes it.
	converted := func(w *config.Workspace) string {
		body := convertedBody(t, w)
		return body + configHashLine(ConfigHash([]byte(body)))
	}
	withConfigMap := func(doc string) *TenantConfigurationReconciler {
		b := fake.NewClientBuilder().WithScheme(scheme)
		if doc != "" {
			b = b.WithObjects(&corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: tenant.Namespace, Name: configMapName(tenant)},
				Data:       map[string]string{ConfigFile: doc},
			})
		}
		return &TenantConfigurationReconciler{objectWriter: objectWriter{Client: b.Build()}}
	}
	step := func(name string, r *TenantConfigurationReconciler, w *config.Workspace, want string) {
		t.Helper()
		doc, hash, err := r.workspaceDocument(ctx, tenant, w)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(doc) != want {
			t.Fatalf("%s: got\n%s\nwant\n%s", name, doc, want)
		}
		if line := configHashLine(hash); len(doc) < len(line) || string(doc[len(doc)-len(line):]) != line {
			t.Fatalf("%s: hash %s is not the one the document names", name, hash)
		}
	}

	step("the first compile", withConfigMap(""), w, converted(w))

	// The ConfigMap's bytes are told apart from a conversion by a comment
	// only they have: a document whose hash the compile of w remembers.
	keptBody := "# kept in the ConfigMap\n" + convertedBody(t, w)
	keptHash := ConfigHash([]byte(keptBody))
	keptDoc := keptBody + configHashLine(keptHash)
	sum, err := workspaceDigest(w)
	if err != nil {
		t.Fatal(err)
	}
	remember := func() { compiled.remember(key, sum, keptHash) }

	remember()
	step("w again, its document in the ConfigMap", withConfigMap(keptDoc), w, keptDoc)

	remember()
	step("w again, the ConfigMap edited by hand under its hash line", withConfigMap(keptBody+"extra: true\n"+configHashLine(keptHash)), w, converted(w))

	remember()
	step("w again, the ConfigMap naming another hash", withConfigMap(keptBody+configHashLine("0123456789abcdef")), w, converted(w))

	remember()
	step("w again, no ConfigMap yet", withConfigMap(""), w, converted(w))

	// A changed workspace is converted, though the ConfigMap holds the
	// document the memory names for the workspace before it.
	changed := &config.Workspace{ID: "document-read-back", SigningKeyFile: "/etc/storybus/other-key"}
	remember()
	step("a changed workspace", withConfigMap(keptDoc), changed, converted(changed))
}

// convertedBody is w's YAML as MarshalWorkspace makes it, without the
// configHash line.
func convertedBody(t *testing.T, w *config.Workspace) string {
	t.Helper()
	b, err := MarshalWorkspace(w)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
