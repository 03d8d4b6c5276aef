package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper counts the RESTMapping questions that reach it.
type countingMapper struct {
	meta.RESTMapper
	asked int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.asked++
	return c.RESTMapper.RESTMapping(gk, versions...)
}

func TestRESTMappingsFoundAreRemembered(t *testing.T) {
	gv := schema.GroupVersion{Group: "bus.storybus.io", Version: "v1alpha1"}
	tenants := gv.WithKind("Tenant")
	inner := meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
	inner.Add(tenants, meta.RESTScopeNamespace)
	counting := &countingMapper{RESTMapper: inner}
	m := newRememberedMappings(counting)

	first, err := m.RESTMapping(tenants.GroupKind(), "v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.RESTMapping(tenants.GroupKind(), "v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	if again != first || counting.asked != 1 {
		t.Errorf("second question: same answer %v, the mapper asked %d times; want the first answer, asked once", again == first, counting.asked)
	}
	if first.Resource.Resource != "tenants" || first.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Errorf("mapping = %+v", first)
	}
	if _, err := m.RESTMapping(tenants.GroupKind(), "v1beta1"); !meta.IsNoMatchError(err) {
		t.Errorf("another version: %v, want no match", err)
	}

	// A kind not served is asked again each time, and found once it is.
	pools := gv.WithKind("BusPool")
	if _, err := m.RESTMapping(pools.GroupKind(), "v1alpha1"); !meta.IsNoMatchError(err) {
		t.Fatalf("kind not served: %v, want no match", err)
	}
	inner.Add(pools, meta.RESTScopeNamespace)
	asked := counting.asked
	if _, err := m.RESTMapping(pools.GroupKind(), "v1alpha1"); err != nil || counting.asked != asked+1 {
		t.Errorf("kind served later: %v, asked %d more times; want found, asked once", err, counting.asked-asked)
	}
}
