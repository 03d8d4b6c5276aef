package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TestNamespacedIndexesAreFound: the indexes kept for one namespace are
// found by the manager's cache as its own indexes are (an index named or
// keyed otherwise would list nothing), hold only their own namespace's
// objects, and a Secret maps to the Connections reading it whether they
// name it or it has their credentials Secret's default name.
func TestNamespacedIndexesAreFound(t *testing.T) {
	ns1, ns2 := newNamespace(t), newNamespace(t)
	create(t, newConnection(ns1, "a", "x", func(c *v1alpha1.Connection) { c.Spec.Credentials.SecretName = "shared" }))
	create(t, newConnection(ns2, "a", "x"))
	create(t, newConnection(ns2, "b", "y"))
	create(t, newGrant(ns1, "g", "a", &v1alpha1.PublishGrant{SystemIDs: []string{"cms"}, MessageTypes: []string{"story.event"}}, nil))

	names := func(conns []v1alpha1.Connection, err error) ([]string, error) {
		var out []string
		for _, c := range conns {
			out = append(out, c.Namespace+"/"+c.Name)
		}
		slices.Sort(out)
		return out, err
	}
	ctx := context.Background()
	for _, tc := range []struct {
		what string
		list func() ([]string, error)
		want []string
	}{
		{"Connections of Tenant x in " + ns1, func() ([]string, error) { return names(connectionsOfTenant(ctx, managerCache, ns1, "x")) }, []string{ns1 + "/a"}},
		{"Connections of Tenant x in " + ns2, func() ([]string, error) { return names(connectionsOfTenant(ctx, managerCache, ns2, "x")) }, []string{ns2 + "/a"}},
		{"Grants of Connection a in " + ns1, func() ([]string, error) {
			gs, err := grantsOfConnection(ctx, managerCache, ns1, "a")
			var out []string
			for _, g := range gs {
				out = append(out, g.Namespace+"/"+g.Name)
			}
			return out, err
		}, []string{ns1 + "/g"}},
		{"Connections reading the Secret they name", func() ([]string, error) { return names(connectionsReadingSecret(ctx, managerCache, ns1, "shared")) }, []string{ns1 + "/a"}},
		{"Connections reading a default credentials name", func() ([]string, error) {
			return names(connectionsReadingSecret(ctx, managerCache, ns2, "b-credentials"))
		}, []string{ns2 + "/b"}},
		{"Connections reading the default name of one that names another", func() ([]string, error) {
			return names(connectionsReadingSecret(ctx, managerCache, ns1, "a-credentials"))
		}, nil},
	} {
		eventually(t, tc.what, func() error {
			got, err := tc.list()
			if err != nil {
				return err
			}
			if !slices.Equal(got, tc.want) {
				return fmt.Errorf("%s: %v, want %v", tc.what, got, tc.want)
			}
			return nil
		})
	}
}
