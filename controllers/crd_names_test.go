package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TestShortNamesAndCategory asks the API server's discovery what kubectl
// sees: every kind has its short name and the storybus category.
func TestShortNamesAndCategory(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	l, err := dc.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tenants": "sbt", "connections": "sbc", "grants": "sbg", "ownershippolicies": "sbop", "buspools": "sbp"}
	seen := 0
	for _, r := range l.APIResources {
		short, ok := want[r.Name]
		if !ok {
			continue
		}
		seen++
		if !slices.Equal(r.ShortNames, []string{short}) || !slices.Contains(r.Categories, "storybus") {
			t.Errorf("%s: short names %v, categories %v; want [%s] and storybus", r.Name, r.ShortNames, r.Categories, short)
		}
	}
	if seen != len(want) {
		t.Errorf("discovery listed %d of the %d kinds", seen, len(want))
	}
}

// TestPrinterColumnsPrintZero reads a Tenant as kubectl get does (the API
// server's Table): its counts print 0, not blank, and every column has a
// description for kubectl explain and dashboards.
func TestPrinterColumnsPrintZero(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "idle", func(tn *v1alpha1.Tenant) { tn.Spec.Replicas = new(int32(0)) }))
	eventually(t, "status of idle", func() error {
		tn := &v1alpha1.Tenant{}
		if err := get(ns, "idle", tn); err != nil {
			return err
		}
		if tn.Status.WorkspaceID == "" {
			return errNotYet
		}
		return nil
	})
	table := getTable(t, "/apis/bus.storybus.io/v1alpha1/namespaces/"+ns+"/tenants/idle?includeObject=None")
	if len(table.Rows) != 1 {
		t.Fatalf("rows %+v", table.Rows)
	}
	row := table.Rows[0].Cells
	for i, c := range table.ColumnDefinitions {
		if c.Description == "" {
			t.Errorf("column %q has no description", c.Name)
		}
		switch c.Name {
		case "Replicas", "Ready Replicas", "Connections":
			if n, ok := row[i].(float64); !ok || n != 0 {
				t.Errorf("column %q = %#v, want 0", c.Name, row[i])
			}
		}
	}
}

// getTable GETs path from the API server as a Table, the way kubectl get
// does.
func getTable(t *testing.T, path string) *metav1.Table {
	t.Helper()
	hc, err := rest.HTTPClientFor(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, strings.TrimSuffix(restConfig.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatal(fmt.Errorf("GET %s: %d %s %v", path, resp.StatusCode, b, err))
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(b, table); err != nil {
		t.Fatal(err)
	}
	return table
}
