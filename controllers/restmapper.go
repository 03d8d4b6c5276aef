package controllers

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// NewRESTMapper is the operator's manager.Options.MapperProvider:
// controller-runtime's dynamic RESTMapper, with the mappings it found
// remembered. The owner handlers (Owns) map every owner reference of every
// event they see, and the metadata client every status patch it sends; the
// dynamic mapper builds each answer anew (a priority list over every
// group's mapper), which at 500 Tenants was 7 % of what the operator
// allocated, for answers that never change while a kind is served. A kind
// not found is not remembered: the dynamic mapper looks for it again (a
// CRD installed later is found).
func NewRESTMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	m, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return newRememberedMappings(m), nil
}

// rememberedMappings is a RESTMapper whose RESTMapping answers are
// remembered once found; the rest is its RESTMapper's.
type rememberedMappings struct {
	meta.RESTMapper
	mu    sync.RWMutex
	found map[mappingKey]*meta.RESTMapping
}

// mappingKey is one RESTMapping question: a kind and the versions asked.
type mappingKey struct {
	gk       schema.GroupKind
	versions string
}

func newRememberedMappings(m meta.RESTMapper) *rememberedMappings {
	return &rememberedMappings{RESTMapper: m, found: map[mappingKey]*meta.RESTMapping{}}
}

// RESTMapping answers as the RESTMapper did the first time it found gk at
// versions. The answer is shared: callers only read it.
func (m *rememberedMappings) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	k := mappingKey{gk: gk, versions: strings.Join(versions, ",")}
	m.mu.RLock()
	r, ok := m.found[k]
	m.mu.RUnlock()
	if ok {
		return r, nil
	}
	r, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.found[k] = r
	m.mu.Unlock()
	return r, nil
}
