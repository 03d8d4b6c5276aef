package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/storybus/storybus/api/v1alpha1"
)

// FieldManager is the server-side apply field manager of everything the
// operator writes.
const FieldManager = "storybus-operator"

// DefaultBusImage is the image Tenants' bus pods run unless the operator or
// the Tenant says otherwise.
const DefaultBusImage = "ghcr.io/storybus/storybus:latest"

// Options configure the reconcilers.
type Options struct {
	// BusImage is the image of bus pods whose Tenant sets none.
	BusImage string
	// BusPlatformUID leaves the bus pods' user, group and fsGroup to the
	// platform, for platforms that assign them from a range of their own
	// (OpenShift's restricted SCC); the pods still run as non-root.
	BusPlatformUID bool
	// BusResources are the requests and limits of the bus container of
	// Tenants that set no spec.resources.
	BusResources corev1.ResourceRequirements
	// ClusterDomain is the cluster's DNS domain, for status.endpoint.
	ClusterDomain string
	// Now returns the current time; nil means time.Now. Tests inject a
	// clock.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.BusImage == "" {
		o.BusImage = DefaultBusImage
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = "cluster.local"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// NewScheme returns a scheme with the built-in kinds and those of
// api/v1alpha1.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// CacheOptions restrict what the manager caches: of all pods and volume
// claims, only the bus's. Pass them as manager.Options.Cache.
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{LabelManagedBy: FieldManager})},
		// The volume claims a StatefulSet makes carry the labels of its
		// claim template: the selector labels, without managed-by.
		&corev1.PersistentVolumeClaim{}: {Label: labels.SelectorFromSet(labels.Set{
			"app.kubernetes.io/name": "storybus", "app.kubernetes.io/component": "bus"})},
	}}
}

// Setup registers the field indexes and the four reconcilers with mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	o = o.withDefaults()
	if err := addIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("field indexes: %w", err)
	}
	if err := registerMetrics(mgr.GetClient()); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	rec := mgr.GetEventRecorder(FieldManager)
	if err := (&TenantReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: rec, Options: o}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("tenant controller: %w", err)
	}
	if err := (&ConnectionReconciler{Client: mgr.GetClient(), Recorder: rec, Options: o}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("connection controller: %w", err)
	}
	if err := (&GrantReconciler{Client: mgr.GetClient(), Recorder: rec}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("grant controller: %w", err)
	}
	if err := (&OwnershipPolicyReconciler{Client: mgr.GetClient(), Recorder: rec}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("ownershippolicy controller: %w", err)
	}
	return nil
}
