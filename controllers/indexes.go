package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/storybus/storybus/api/v1alpha1"
)

// Field indexes that turn a changed object into the objects that refer to
// it.
const (
	// indexTenantRef indexes Connections and OwnershipPolicies by
	// spec.tenantRef.name.
	indexTenantRef = "spec.tenantRef.name"
	// indexConnectionRef indexes Grants by spec.connectionRef.name.
	indexConnectionRef = "spec.connectionRef.name"
	// indexSecretNames indexes Connections by the Secrets they read: the
	// credentials Secret and the IAM access key Secret.
	indexSecretNames = "secretNames"
	// indexExternalWorkspace indexes Tenants on external storage by their
	// workspace id, which names their streams and buckets on the cluster.
	indexExternalWorkspace = "externalWorkspaceID"
	// indexPodTenant indexes the operator's pods by the Tenant they serve
	// (their LabelTenant): the readiness controller reads a Tenant's bus
	// pods every second while they load a configuration, and a label
	// selector scans every pod of the namespace (at 500 Tenants a tenth
	// of the operator's CPU).
	indexPodTenant = "podTenant"
)

func addIndexes(ctx context.Context, fi client.FieldIndexer) error {
	if err := fi.IndexField(ctx, &v1alpha1.Connection{}, indexTenantRef, func(o client.Object) []string {
		return []string{o.(*v1alpha1.Connection).Spec.TenantRef.Name}
	}); err != nil {
		return err
	}
	if err := fi.IndexField(ctx, &v1alpha1.Connection{}, indexSecretNames, func(o client.Object) []string {
		return connectionSecretNames(o.(*v1alpha1.Connection))
	}); err != nil {
		return err
	}
	if err := fi.IndexField(ctx, &v1alpha1.OwnershipPolicy{}, indexTenantRef, func(o client.Object) []string {
		return []string{o.(*v1alpha1.OwnershipPolicy).Spec.TenantRef.Name}
	}); err != nil {
		return err
	}
	if err := fi.IndexField(ctx, &v1alpha1.Tenant{}, indexExternalWorkspace, func(o client.Object) []string {
		t := o.(*v1alpha1.Tenant)
		if t.Spec.Storage == nil || t.Spec.Storage.External == nil {
			return nil
		}
		return []string{t.EffectiveWorkspaceID()}
	}); err != nil {
		return err
	}
	if err := fi.IndexField(ctx, &v1alpha1.Tenant{}, indexTLSSecretName, indexTLSSecret); err != nil {
		return err
	}
	if err := fi.IndexField(ctx, &corev1.Pod{}, indexPodTenant, func(o client.Object) []string {
		if o.GetLabels()[LabelManagedBy] != FieldManager || o.GetLabels()[LabelTenant] == "" {
			return nil
		}
		return []string{o.GetLabels()[LabelTenant]}
	}); err != nil {
		return err
	}
	return fi.IndexField(ctx, &v1alpha1.Grant{}, indexConnectionRef, func(o client.Object) []string {
		return []string{o.(*v1alpha1.Grant).Spec.ConnectionRef.Name}
	})
}

// connectionSecretNames are the Secrets a Connection reads.
func connectionSecretNames(c *v1alpha1.Connection) []string {
	names := []string{c.CredentialsSecretName()}
	if c.Spec.IAM != nil {
		names = append(names, c.Spec.IAM.AccessKeySecretRef.Name)
	}
	return names
}

// requestsFor turns names in ns into reconcile requests, without
// duplicates.
func requestsFor(ns string, names ...string) []reconcile.Request {
	seen := map[string]bool{}
	var out []reconcile.Request
	for _, n := range names {
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: n}})
	}
	return out
}

// The lists below read the cache without copying it
// (UnsafeDisableDeepCopy): their callers, map functions and the
// configuration's compile, only read what they list. At 500 Tenants the
// copies were a tenth of what the operator allocated. A caller that must
// change a listed object copies it first.

// connectionsOfTenant lists the Connections whose tenantRef names tenant.
func connectionsOfTenant(ctx context.Context, c client.Reader, ns, tenant string) ([]v1alpha1.Connection, error) {
	var l v1alpha1.ConnectionList
	if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{indexTenantRef: tenant}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// grantsOfConnection lists the Grants whose connectionRef names conn.
func grantsOfConnection(ctx context.Context, c client.Reader, ns, conn string) ([]v1alpha1.Grant, error) {
	var l v1alpha1.GrantList
	if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{indexConnectionRef: conn}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// policiesOfTenant lists the OwnershipPolicies whose tenantRef names tenant.
func policiesOfTenant(ctx context.Context, c client.Reader, ns, tenant string) ([]v1alpha1.OwnershipPolicy, error) {
	var l v1alpha1.OwnershipPolicyList
	if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{indexTenantRef: tenant}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return l.Items, nil
}
