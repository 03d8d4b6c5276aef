package controllers

import (
	"context"
	"fmt"
	"time"

	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// FieldManager is the server-side apply field manager of everything the
// operator writes.
const FieldManager = "storybus-operator"

// DefaultBusImage is the image Tenants' bus pods run unless the operator or
// the Tenant says otherwise.
const DefaultBusImage = "ghcr.io/storybus/storybus:latest"

// DefaultMonitoringNamespace is the namespace whose pods may reach the bus
// pods' operations port unless the operator is told another.
const DefaultMonitoringNamespace = "monitoring"

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
	// BusEnv are OpenTelemetry variables (OTEL_*) of every bus container:
	// a Tenant's spec.template.pod.env wins by name.
	BusEnv []corev1.EnvVar
	// ClusterDomain is the cluster's DNS domain, for status.endpoint.
	ClusterDomain string
	// Now returns the current time; nil means time.Now. Tests inject a
	// clock.
	Now func() time.Time
	// NetworkPolicy are the defaults of the Tenants' NetworkPolicies.
	NetworkPolicy NetworkPolicyOptions
	// Expose are the defaults of the Tenants' spec.expose.
	Expose ExposeOptions
	// Monitoring are the defaults of the Tenants' spec.monitoring.
	Monitoring MonitoringOptions
	// TrustedProxies are the CIDRs of the trusted proxies of bus pods whose
	// Tenant sets no spec.trustedProxies.
	TrustedProxies []string
	// WatchNamespaces are the namespaces the manager's cache holds (as
	// CacheOptions was given them); empty means every namespace.
	WatchNamespaces []string
	// Prober asks ready bus pods which configuration they serve; nil means
	// an HTTPConfigProber.
	Prober ConfigProber
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
	if o.NetworkPolicy.MonitoringNamespace == "" {
		o.NetworkPolicy.MonitoringNamespace = DefaultMonitoringNamespace
	}
	return o
}

// NewScheme returns a scheme with the built-in kinds and those of
// api/v1alpha1 and Gateway API v1.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	// HTTPRoute is known to the scheme even where its CRDs are not
	// installed: the RESTMapper says whether the cluster serves it.
	if err := gatewayv1.Install(s); err != nil {
		return nil, err
	}
	return s, nil
}

// CacheOptions restrict what the manager caches to what the operator
// needs: of the kinds it writes (and of pods), only the objects it labels as
// its own (LabelManagedBy = FieldManager: Secrets users name are watched
// as metadata only and read directly, see Secrets); of volume claims, only
// the bus's; of every object, no managed fields, and of the objects users
// write, no copy of their last kubectl apply. When namespaces are given,
// only objects in those. Pass them as manager.Options.Cache, and the same
// namespaces as Options.WatchNamespaces.
func CacheOptions(namespaces ...string) cache.Options {
	managed := cache.ByObject{Label: managedSelector()}
	return cache.Options{
		DefaultNamespaces: namespaceConfigs(namespaces),
		DefaultTransform:  stripCachedMetadata,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                   managed,
			&corev1.Secret{}:                managed,
			&corev1.ConfigMap{}:             managed,
			&corev1.Service{}:               managed,
			&appsv1.StatefulSet{}:           managed,
			&policyv1.PodDisruptionBudget{}: managed,
			&networkingv1.NetworkPolicy{}:   managed,
			&networkingv1.Ingress{}:         managed,
			// HTTPRoutes are cached whole: a by-object option needs the
			// kind served, and the Gateway API is optional.
			//
			// The volume claims a StatefulSet makes carry the labels of its
			// claim template: the selector labels, without managed-by.
			&corev1.PersistentVolumeClaim{}: {Label: labels.SelectorFromSet(labels.Set{
				"app.kubernetes.io/name": "storybus", "app.kubernetes.io/component": "bus"})},
		},
	}
}

// stripCachedMetadata drops from an object before it is cached what the
// operator never reads: its managed fields; on the kinds users write
// (the operator writes them only by patches computed from the cached
// copy, which leave the annotation alone), the copy kubectl apply keeps
// (Secrets keep theirs: it says a user applied a generated Secret); of a
// pod's spec all but its containers' names and ports (cachedPodSpec); and
// of a StatefulSet's pod template all but its containers' names and
// arguments (trimCachedStatefulSet). The strings the custom resources
// repeat are kept once (internCachedStrings).
func stripCachedMetadata(in any) (any, error) {
	o, ok := in.(metav1.Object)
	if !ok {
		return in, nil
	}
	o.SetManagedFields(nil)
	if a := o.GetAnnotations(); a[annotationCachedDigest] != "" && !trimmed(in) {
		// Only the cache's own trim sets it (trimCachedStatefulSet); one a
		// user set means nothing.
		a = maps.Clone(a)
		delete(a, annotationCachedDigest)
		o.SetAnnotations(a)
	}
	switch obj := in.(type) {
	case *corev1.Pod:
		obj.Spec = cachedPodSpec(obj.Spec)
	case *appsv1.StatefulSet:
		if err := trimCachedStatefulSet(obj); err != nil {
			return nil, err
		}
	case *v1alpha1.Tenant, *v1alpha1.Connection, *v1alpha1.Grant, *v1alpha1.OwnershipPolicy, *v1alpha1.BusPool:
		if a := o.GetAnnotations(); a[lastAppliedAnnotation] != "" {
			a = maps.Clone(a)
			delete(a, lastAppliedAnnotation)
			o.SetAnnotations(a)
		}
		internCachedStrings(obj.(v1alpha1.ConditionedObject))
	}
	return in, nil
}

// cachedPodSpec is what the operator reads of a pod's spec: its
// containers' names and ports (the port it asks a bus pod for its
// configuration on). The operator never writes a pod; it reads their
// status, and a bus pod's spec (image, environment, probes, volumes) was
// a twentieth of its heap at 500 Tenants.
func cachedPodSpec(spec corev1.PodSpec) corev1.PodSpec {
	var kept corev1.PodSpec
	for _, c := range spec.Containers {
		kept.Containers = append(kept.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
	}
	return kept
}

// namespaceConfigs are cache.Options.DefaultNamespaces for namespaces: nil,
// every namespace, when there are none.
func namespaceConfigs(namespaces []string) map[string]cache.Config {
	if len(namespaces) == 0 {
		return nil
	}
	m := make(map[string]cache.Config, len(namespaces))
	for _, ns := range namespaces {
		m[ns] = cache.Config{}
	}
	return m
}

// Setup registers the field indexes and the reconcilers with mgr: the
// Tenant's three (configuration, workload, readiness), the Connection's,
// the reference checks of Grants and OwnershipPolicies, the BusPool's, and
// the placement of pooled Tenants on their pools.
func Setup(mgr ctrl.Manager, o Options) error {
	o = o.withDefaults()
	if err := addIndexes(context.Background(), mgr.GetCache()); err != nil {
		return fmt.Errorf("field indexes: %w", err)
	}
	if err := addPoolIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("pool field indexes: %w", err)
	}
	if err := addPlacedIndex(context.Background(), mgr.GetCache()); err != nil {
		return fmt.Errorf("pool placement index: %w", err)
	}
	if err := registerMetrics(mgr.GetClient()); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	rec := mgr.GetEventRecorder(FieldManager)
	// The reads of the operator's own kinds past the cache are counted
	// (uncachedReads).
	direct := countedReader{Reader: mgr.GetAPIReader(), scheme: mgr.GetScheme()}
	secrets, err := newSecrets(mgr, direct, o.WatchNamespaces)
	if err != nil {
		return err
	}
	w := objectWriter{Client: mgr.GetClient(), APIReader: direct}
	if err := (&TenantConfigurationReconciler{objectWriter: w, Secrets: secrets, Recorder: rec}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("tenant configuration controller: %w", err)
	}
	if err := (&TenantWorkloadReconciler{objectWriter: w, Secrets: secrets, Recorder: rec, Cache: mgr.GetCache(), Options: o}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("tenant workload controller: %w", err)
	}
	if err := (&TenantReadinessReconciler{Client: mgr.GetClient(), Recorder: rec, Options: o}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("tenant readiness controller: %w", err)
	}
	if err := (&ConnectionCredentialsReconciler{Client: mgr.GetClient(), Secrets: secrets, Recorder: rec, Options: o}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("connection credentials controller: %w", err)
	}
	if err := (&ConnectionReconciler{Client: mgr.GetClient(), Secrets: secrets, Recorder: rec}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("connection controller: %w", err)
	}
	if err := grantReferences(mgr.GetClient(), rec).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("grant controller: %w", err)
	}
	if err := ownershipPolicyReferences(mgr.GetClient(), rec).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("ownershippolicy controller: %w", err)
	}
	pools := newPoolClients()
	if err := mgr.Add(pools); err != nil {
		return err
	}
	if err := (&BusPoolReconciler{objectWriter: w, Secrets: secrets, Recorder: rec, Pools: pools, Cache: mgr.GetCache(), Options: o}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("buspool controller: %w", err)
	}
	if err := (&TenantPoolReconciler{Client: mgr.GetClient(), APIReader: direct, Secrets: secrets, Recorder: rec, Pools: pools, Options: o}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("tenant pool controller: %w", err)
	}
	return nil
}
