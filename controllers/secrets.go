package controllers

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// The operator reads Secrets without holding every Secret of the cluster
// in memory. The manager's cache holds only the Secrets the operator makes
// and labels (LabelManagedBy = FieldManager: signing keys, generated
// credentials). The Secrets users name (a reused credentials Secret, an IAM
// access key Secret, TLS and NATS credentials) are watched through a second
// cache that holds only their metadata, with annotations stripped (kubectl
// apply copies a Secret's data into an annotation), and read straight from
// the API server the first time they are needed and again whenever their
// resourceVersion changes: the operator keeps the last read of each Secret
// it was asked for, and nothing of the others.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update

// Secrets reads and watches Secrets for the reconcilers.
type Secrets struct {
	// cached is the manager's cache: the operator's own Secrets only.
	cached client.Reader
	// direct reads from the API server.
	direct client.Reader
	// others holds the metadata of the Secrets the operator does not label.
	others cache.Cache

	mu sync.Mutex
	// read are the last direct reads of the Secrets asked for, by key.
	read map[client.ObjectKey]*corev1.Secret
}

// managedSelector selects the objects the operator labels as its own.
func managedSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: FieldManager})
}

// secretMetadata is the type of the metadata-only watch of Secrets.
func secretMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// newSecrets makes the Secrets of mgr, whose cache holds the namespaces
// given (all when none), reading past it with direct, and adds its
// metadata cache to mgr.
func newSecrets(mgr ctrl.Manager, direct client.Reader, namespaces []string) (*Secrets, error) {
	notManaged, err := labels.NewRequirement(LabelManagedBy, selection.NotEquals, []string{FieldManager})
	if err != nil {
		return nil, err
	}
	others, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:        mgr.GetHTTPClient(),
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		DefaultNamespaces: namespaceConfigs(namespaces),
		ByObject: map[client.Object]cache.ByObject{secretMetadata(): {
			Label:     labels.NewSelector().Add(*notManaged),
			Transform: stripSecretMetadata,
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("secret metadata cache: %w", err)
	}
	if err := mgr.Add(others); err != nil {
		return nil, err
	}
	return &Secrets{cached: mgr.GetCache(), direct: direct, others: others, read: map[client.ObjectKey]*corev1.Secret{}}, nil
}

// stripSecretMetadata keeps of a Secret's metadata only what maps it to
// the objects that name it.
func stripSecretMetadata(in any) (any, error) {
	if m, ok := in.(*metav1.PartialObjectMetadata); ok {
		m.Annotations, m.ManagedFields = nil, nil
	}
	return in, nil
}

// Get reads a Secret: from the cache when the operator labels it, else,
// when the metadata cache holds it, the last read from the API server
// while its resourceVersion is the same, else from the API server. A
// Secret neither cache holds is not found: like any cached read, its
// creation comes as an event, which reconciles again.
func (s *Secrets) Get(ctx context.Context, key client.ObjectKey, sec *corev1.Secret) error {
	err := s.cached.Get(ctx, key, sec)
	if !apierrors.IsNotFound(err) {
		return err
	}
	md := secretMetadata()
	if err := s.others.Get(ctx, key, md); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone, or not there yet: its watch event reconciles again.
			s.mu.Lock()
			delete(s.read, key)
			s.mu.Unlock()
		}
		return err
	}
	s.mu.Lock()
	last := s.read[key]
	s.mu.Unlock()
	if last != nil && last.ResourceVersion == md.ResourceVersion {
		last.DeepCopyInto(sec)
		return nil
	}
	if err := s.direct.Get(ctx, key, sec); err != nil {
		return err
	}
	if sec.Labels[LabelManagedBy] != FieldManager {
		s.mu.Lock()
		s.read[key] = sec.DeepCopy()
		s.mu.Unlock()
	}
	return nil
}

// Watch makes b watch every Secret the operator can see, labelled or not,
// mapped to requests by fn, coalesced by c (nil: enqueued at once).
func (s *Secrets) Watch(b *builder.Builder, fn handler.MapFunc, c *coalescer) *builder.Builder {
	return b.
		Watches(&corev1.Secret{}, coalesced(c, fn)).
		WatchesRawSource(source.Kind(s.others, secretMetadata(),
			coalesced(c, func(ctx context.Context, o *metav1.PartialObjectMetadata) []reconcile.Request {
				return fn(ctx, o)
			})))
}

// ensureManagedLabel labels sec as the operator's, so the cache holds it;
// it reports whether the label was missing.
func ensureManagedLabel(sec *corev1.Secret) bool {
	if sec.Labels[LabelManagedBy] == FieldManager {
		return false
	}
	if sec.Labels == nil {
		sec.Labels = map[string]string{}
	}
	sec.Labels[LabelManagedBy] = FieldManager
	return true
}
