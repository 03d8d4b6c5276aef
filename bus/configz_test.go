package bus_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"sigs.k8s.io/yaml"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/internal/openapitest"
)

// /configz reports, per workspace, the hash of the configuration document
// in force: the operator compares it with the hash of the ConfigMap it
// wrote. A document that is rejected leaves the previous hash.
func TestConfigzReportsTheDocumentInForce(t *testing.T) {
	h := newHarness(t)
	ops, _ := openapitest.Serve(t, openapitest.OperationsPort, h.srv.OpsHandler())
	configz := func() map[string]string {
		t.Helper()
		res, err := http.Get(ops.URL + "/configz")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body struct {
			Workspaces []bus.LoadedConfig `json:"workspaces"`
		}
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("configz %d: %v", res.StatusCode, err)
		}
		out := map[string]string{}
		for _, w := range body.Workspaces {
			out[w.Workspace] = w.ConfigHash
		}
		return out
	}
	if got := configz(); len(got) != 2 || got["newsroom"] != "" {
		t.Fatalf("configurations built in memory: %v", got)
	}

	doc, err := yaml.Marshal(workspaceConfig("newsroom"))
	if err != nil {
		t.Fatal(err)
	}
	doc = append([]byte("# a comment is part of the document\n"), doc...)
	cfg, err := config.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	want := config.DocumentHash(doc)
	if got := configz(); got["newsroom"] != want || got["other"] != "" {
		t.Fatalf("got %v, want newsroom %s", got, want)
	}

	bad := *cfg
	bad.Hash = "sha256:rejected"
	bad.Policies = []config.PolicyModule{{Name: "broken", Rego: "package storybus.tenant.broken\n\nthis is not rego"}}
	if err := h.srv.Apply(context.Background(), &bad); err == nil {
		t.Fatal("a policy that does not compile was applied")
	}
	if got := configz(); got["newsroom"] != want {
		t.Fatalf("after a rejected document: %v, want %s", got, want)
	}
}
