package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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

// addIndexes adds the field indexes of Connections, Grants,
// OwnershipPolicies, Tenants and pods to c. The indexes that are only
// asked within one namespace are indexNamespaced.
func addIndexes(ctx context.Context, c cache.Cache) error {
	if err := indexNamespaced(ctx, c, &v1alpha1.Connection{}, indexTenantRef, func(o client.Object) []string {
		return []string{o.(*v1alpha1.Connection).Spec.TenantRef.Name}
	}); err != nil {
		return err
	}
	if err := indexNamespaced(ctx, c, &v1alpha1.Connection{}, indexSecretNames, func(o client.Object) []string {
		return namedSecrets(o.(*v1alpha1.Connection))
	}); err != nil {
		return err
	}
	if err := indexNamespaced(ctx, c, &v1alpha1.OwnershipPolicy{}, indexTenantRef, func(o client.Object) []string {
		return []string{o.(*v1alpha1.OwnershipPolicy).Spec.TenantRef.Name}
	}); err != nil {
		return err
	}
	if err := c.IndexField(ctx, &v1alpha1.Tenant{}, indexExternalWorkspace, func(o client.Object) []string {
		t := o.(*v1alpha1.Tenant)
		if t.Spec.Storage == nil || t.Spec.Storage.External == nil {
			return nil
		}
		return []string{t.EffectiveWorkspaceID()}
	}); err != nil {
		return err
	}
	if err := indexNamespaced(ctx, c, &v1alpha1.Tenant{}, indexTLSSecretName, indexTLSSecret); err != nil {
		return err
	}
	if err := indexNamespaced(ctx, c, &corev1.Pod{}, indexPodTenant, func(o client.Object) []string {
		if o.GetLabels()[LabelManagedBy] != FieldManager || o.GetLabels()[LabelTenant] == "" {
			return nil
		}
		return []string{o.GetLabels()[LabelTenant]}
	}); err != nil {
		return err
	}
	return indexNamespaced(ctx, c, &v1alpha1.Grant{}, indexConnectionRef, func(o client.Object) []string {
		return []string{o.(*v1alpha1.Grant).Spec.ConnectionRef.Name}
	})
}

// indexNamespaced adds to c's informer of obj's kind the field index
// field, whose values value gives, for lists within one namespace
// (client.InNamespace and client.MatchingFields): a list of every
// namespace by it finds nothing. The manager's IndexField keeps every
// value twice, once for its namespace and once for all namespaces; at
// 500 Tenants its indexes of Connections, Grants and pods were a seventh
// of the operator's heap, half of it the copies no list asked for.
func indexNamespaced(ctx context.Context, c cache.Cache, obj client.Object, field string, value client.IndexerFunc) error {
	informer, err := c.GetInformer(ctx, obj)
	if err != nil {
		return err
	}
	return informer.AddIndexers(toolscache.Indexers{fieldIndexName(field): func(raw any) ([]string, error) {
		o, ok := raw.(client.Object)
		if !ok {
			return nil, fmt.Errorf("field index %s: %T is not an object", field, raw)
		}
		vals := value(o)
		keys := make([]string, len(vals))
		for i, v := range vals {
			keys[i] = namespacedIndexKey(o.GetNamespace(), v)
		}
		return keys, nil
	}})
}

// fieldIndexName and namespacedIndexKey name an index and its key as the
// manager's cache looks them up for client.MatchingFields within a
// namespace (TestNamespacedIndexesAreFound).
func fieldIndexName(field string) string { return "field:" + field }

func namespacedIndexKey(ns, value string) string { return ns + "/" + value }

// namedSecrets are the Secrets a Connection names itself: a credentials
// Secret given by name and the IAM access key Secret. The credentials
// Secret of the default name, which every Connection without one has, is
// not indexed (connectionsReadingSecret finds its Connection by its name).
func namedSecrets(c *v1alpha1.Connection) []string {
	var names []string
	if c.Spec.Credentials.SecretName != "" {
		names = append(names, c.Spec.Credentials.SecretName)
	}
	if c.Spec.IAM != nil {
		names = append(names, c.Spec.IAM.AccessKeySecretRef.Name)
	}
	return names
}

// connectionsReadingSecret lists the Connections in ns that read Secret
// name: those naming it (the index), and the Connection whose credentials
// Secret it is by its default name. The Connections are the cache's own,
// to be read only.
func connectionsReadingSecret(ctx context.Context, c client.Reader, ns, name string) ([]v1alpha1.Connection, error) {
	var l v1alpha1.ConnectionList
	if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{indexSecretNames: name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	if conn, ok := strings.CutSuffix(name, v1alpha1.CredentialsSecretSuffix); ok && conn != "" {
		var own v1alpha1.Connection
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: conn}, &own, client.UnsafeDisableDeepCopy)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		case own.Spec.Credentials.SecretName == "":
			// One that names its Secret itself is in the index.
			l.Items = append(l.Items, own)
		}
	}
	return l.Items, nil
}

// connectionSecretNames are the Secrets a Connection reads: those it names,
// and its credentials Secret of the default name when it names none.
func connectionSecretNames(c *v1alpha1.Connection) []string {
	names := namedSecrets(c)
	if c.Spec.Credentials.SecretName == "" {
		names = append(names, c.CredentialsSecretName())
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
