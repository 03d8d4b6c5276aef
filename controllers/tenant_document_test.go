package controllers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
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
// document (none yet, or one changed by hand under its configHash line)
// has the workspace converted again.
func TestWorkspaceDocumentReadBackFromTheConfigMap(t *testing.T) {
	ctx := context.Background()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	tenant := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: "desk", Name: "document-read-back"}}
	w := &config.Workspace{ID: "document-read-back", SigningKeyFile: "/etc/storybus/signing-key"}
	marshalled, err := MarshalWorkspace(w)
	if err != nil {
		t.Fatal(err)
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
	document := func(r *TenantConfigurationReconciler) []byte {
		t.Helper()
		b, err := r.workspaceDocument(ctx, tenant, w)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// The first compile converts the workspace.
	if got := document(withConfigMap("")); !bytes.Equal(got, marshalled) {
		t.Fatalf("first compile:\n%s\nwant\n%s", got, marshalled)
	}
	// The same workspace again, its document in the ConfigMap: the
	// ConfigMap's bytes are used. They are told apart from a conversion
	// by a comment only the ConfigMap has (a document the compile of this
	// workspace remembers the hash of).
	kept := append([]byte("# kept in the ConfigMap\n"), marshalled...)
	compiled.remember(client.ObjectKeyFromObject(tenant), workspaceDigest(t, w), ConfigHash(kept))
	if got := document(withConfigMap(string(kept) + configHashLine(ConfigHash(kept)))); !bytes.Equal(got, kept) {
		t.Fatalf("compiled again, its document in the ConfigMap: got\n%s\nwant the ConfigMap's\n%s", got, kept)
	}
	// Changed by hand under the same configHash line: converted again.
	edited := string(kept) + "extra: true\n" + configHashLine(ConfigHash(kept))
	if got := document(withConfigMap(edited)); !bytes.Equal(got, marshalled) {
		t.Fatalf("the ConfigMap edited by hand: got\n%s\nwant the workspace converted again", got)
	}
	// No ConfigMap yet (the last write not in the cache): converted again.
	compiled.remember(client.ObjectKeyFromObject(tenant), workspaceDigest(t, w), ConfigHash(kept))
	if got := document(withConfigMap("")); !bytes.Equal(got, marshalled) {
		t.Fatalf("no ConfigMap: got\n%s\nwant the workspace converted", got)
	}
}

// workspaceDigest is the digest compiled remembers of w.
func workspaceDigest(t *testing.T, w *config.Workspace) [sha256.Size]byte {
	t.Helper()
	j, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(j)
}
