package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	config "github.com/storybus/storybus/api/config/v1alpha1"
)

// TestPoolDocumentMemo: a pooled Tenant's document is made again only
// when its ConfigMap, its Secret or its key pair changed, and what the
// memo hands out or was given cannot change what it keeps.
func TestPoolDocumentMemo(t *testing.T) {
	m := &poolDocumentMemo{last: map[types.NamespacedName]poolDocumentMade{}}
	key := types.NamespacedName{Namespace: "brand", Name: "news"}
	pair := &config.WorkspaceTLS{Certificate: "cert", Key: "key", Hosts: []string{"news.example"}}
	from := poolDocumentInputs{configMap: "10", secret: "11", pair: pair}
	if _, _, ok := m.lookup(key, from); ok {
		t.Fatal("a document before any was made")
	}
	doc := []byte(`{"id":"news"}`)
	m.remember(key, from, doc, "h1")
	doc[0] = 'X'
	pair.Hosts[0] = "other.example"

	same := poolDocumentInputs{configMap: "10", secret: "11", pair: &config.WorkspaceTLS{Certificate: "cert", Key: "key", Hosts: []string{"news.example"}}}
	got, hash, ok := m.lookup(key, same)
	if !ok || string(got) != `{"id":"news"}` || hash != "h1" {
		t.Fatalf("lookup with the same inputs: %q %q %v", got, hash, ok)
	}
	got[0] = 'Y'
	if again, _, _ := m.lookup(key, same); string(again) != `{"id":"news"}` {
		t.Fatalf("the memo's document changed through a lookup's: %q", again)
	}

	for name, changed := range map[string]poolDocumentInputs{
		"the ConfigMap": {configMap: "12", secret: "11", pair: same.pair},
		"the Secret":    {configMap: "10", secret: "13", pair: same.pair},
		"no key pair":   {configMap: "10", secret: "11"},
		"its hosts":     {configMap: "10", secret: "11", pair: &config.WorkspaceTLS{Certificate: "cert", Key: "key", Hosts: []string{"other.example"}}},
		"its key":       {configMap: "10", secret: "11", pair: &config.WorkspaceTLS{Certificate: "cert", Key: "key2", Hosts: []string{"news.example"}}},
	} {
		if _, _, ok := m.lookup(key, changed); ok {
			t.Errorf("%s changed: the old document was handed out", name)
		}
	}
	if _, _, ok := m.lookup(types.NamespacedName{Namespace: "brand", Name: "other"}, same); ok {
		t.Error("another Tenant's document was handed out")
	}
	m.forget(key)
	if _, _, ok := m.lookup(key, same); ok {
		t.Error("a forgotten document was handed out")
	}
}
