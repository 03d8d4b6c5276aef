package cli

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/controllers"
	"github.com/storybus/storybus/internal/buildinfo"
	"github.com/storybus/storybus/internal/startpages"
)

// OperatorOptions are the flags of `storybus operator`.
type OperatorOptions struct {
	Kubeconfig         string
	MetricsBindAddress string
	// MetricsSecure serves /metrics over HTTPS to authenticated and
	// authorised clients only.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for the metrics endpoint;
	// empty means a self-signed certificate made at start.
	MetricsCertDir         string
	HealthProbeBindAddress string
	// PprofBindAddress serves Go's /debug/pprof; "0" or empty disables it.
	PprofBindAddress string
	// MemoryLimit is the memory the operator may use (its container's
	// limit, which the chart passes as STORYBUS_MEMORY_LIMIT); the Go
	// memory limit is set to nine tenths of it unless GOMEMLIMIT is set.
	MemoryLimit             string
	LeaderElect             bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	// WatchNamespaces are the namespaces reconciled (and cached); empty
	// means every namespace.
	WatchNamespaces []string
	BusImage        string
	// BusPlatformUID leaves the bus pods' user and group to the platform.
	BusPlatformUID bool
	// BusCPURequest and BusMemoryRequest are the requests of bus
	// containers whose Tenant sets no spec.resources; empty sets none.
	BusCPURequest    string
	BusMemoryRequest string
	// BusMemoryLimit is the memory limit of those containers; empty sets
	// none. The bus sets its Go memory limit from it (GOMEMLIMIT).
	BusMemoryLimit string
	ClusterDomain  string
	// APICompression asks the API server to compress its large answers
	// (gzip): off by default, since in a cluster the API server is near
	// and compressing its lists and watch-list streams costs both sides
	// CPU. A kubeconfig that disables compression keeps it disabled.
	APICompression bool
	// MaxConcurrentReconciles is how many objects of one kind are
	// reconciled at once; 0 means controller-runtime's default of one.
	MaxConcurrentReconciles int
	// SyncPeriod is how often every cached object is reconciled again,
	// changed or not; 0 leaves controller-runtime's default (10 hours).
	SyncPeriod time.Duration
	// NetworkPolicy renders a NetworkPolicy for every Tenant that does not
	// say (spec.networkPolicy.enabled).
	NetworkPolicy bool
	// NetworkPolicyPublishNamespaces is a label selector of the namespaces
	// allowed to reach Tenants' publish port.
	NetworkPolicyPublishNamespaces string
	// NetworkPolicyMonitoringNamespace may reach Tenants' operations port.
	NetworkPolicyMonitoringNamespace string
	// NetworkPolicyDNSNamespace and NetworkPolicyDNSPods select the
	// cluster DNS, the only destination of the bus pods' DNS egress.
	NetworkPolicyDNSNamespace string
	NetworkPolicyDNSPods      string
	// OperatorNamespace is the operator's own namespace, which may reach
	// Tenants' operations port too.
	OperatorNamespace string
	// ExposeGateway is the Gateway ("namespace/name", or "name" in each
	// Tenant's namespace) of Tenants whose spec.expose.gateway names no
	// parentRefs.
	ExposeGateway string
	// TrustedProxies are the CIDRs of the trusted proxies of Tenants that
	// set no spec.trustedProxies.
	TrustedProxies []string
	// PodMonitor writes a Prometheus Operator PodMonitor for every Tenant
	// that does not say (spec.monitoring.podMonitor.enabled), with
	// PodMonitorInterval and PodMonitorLabels unless the Tenant sets its own.
	PodMonitor         bool
	PodMonitorInterval string
	PodMonitorLabels   map[string]string
	// BusEnv are NAME=VALUE OpenTelemetry variables (OTEL_*) of every bus
	// container; a Tenant's spec.template.pod.env wins by name.
	BusEnv    []string
	LogFormat string
	LogLevel  string
}

func (o *OperatorOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG, the in-cluster configuration or ~/.kube/config")
	f.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8443", "address of the Prometheus /metrics endpoint; 0 disables it")
	f.BoolVar(&o.MetricsSecure, "metrics-secure", true, "serve /metrics over HTTPS, only to clients the API server authenticates (TokenReview) and authorises to get the non-resource URL /metrics (SubjectAccessReview); false serves plain HTTP to anyone, for local development")
	f.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for the metrics endpoint (reloaded when they change); empty uses a self-signed certificate")
	f.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	f.StringVar(&o.PprofBindAddress, "pprof-bind-address", "0", "address of Go's /debug/pprof profiles (CPU, heap) for diagnosing the operator; 0 disables it")
	f.StringVar(&o.MemoryLimit, "memory-limit", "", "the memory the operator may use (its container's limit), in bytes or as a Kubernetes quantity (256Mi): the Go heap is kept under nine tenths of it unless GOMEMLIMIT is set; empty sets nothing")
	f.BoolVar(&o.LeaderElect, "leader-elect", false, "elect a leader among operator replicas (a Lease); only the leader reconciles")
	f.StringVar(&o.LeaderElectionID, "leader-election-id", "storybus-operator.bus.storybus.io", "name of the leader election Lease")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease; empty uses --operator-namespace, else the namespace the operator runs in")
	f.StringSliceVar(&o.WatchNamespaces, "watch-namespaces", nil, "reconcile only these namespaces (comma-separated, or the flag repeated); the operator then caches and reads nothing outside them. Empty reconciles all")
	f.StringSliceVar(&o.WatchNamespaces, "watch-namespace", nil, "the same as --watch-namespaces")
	_ = f.MarkDeprecated("watch-namespace", "use --watch-namespaces")
	f.StringVar(&o.BusImage, "bus-image", controllers.DefaultBusImage, "image of the bus pods of Tenants that set no spec.image")
	f.BoolVar(&o.BusPlatformUID, "bus-platform-uid", false, "leave the bus pods' user, group and fsGroup to the platform (OpenShift's restricted SCC assigns them) instead of the image's user 65532; they still run as non-root")
	f.StringVar(&o.BusCPURequest, "bus-cpu-request", DefaultBusCPURequest, "CPU request of the bus pods of Tenants that set no spec.resources; empty sets none")
	f.StringVar(&o.BusMemoryRequest, "bus-memory-request", DefaultBusMemoryRequest, "memory request of the bus pods of Tenants that set no spec.resources; empty sets none")
	f.StringVar(&o.BusMemoryLimit, "bus-memory-limit", DefaultBusMemoryLimit, "memory limit of the bus pods of Tenants that set no spec.resources (the bus keeps its Go heap under nine tenths of it); empty sets none")
	f.StringVar(&o.ClusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain, for Tenants' status.endpoint")
	f.BoolVar(&o.APICompression, "api-compression", false, "ask the API server to gzip its large answers (lists over 128 KiB, watch-list streams); off by default, since in a cluster the API server is near and compression costs it and the operator CPU; on for an operator reaching its API server over a slow link (a kubeconfig that disables compression keeps it disabled)")
	f.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", DefaultMaxConcurrentReconciles, "objects of one kind reconciled at once (Tenants, Connections, …); reconciles wait mostly on the API server")
	f.DurationVar(&o.SyncPeriod, "sync-period", 0, "how often every object is reconciled again even when nothing changed (a resync; it writes nothing when nothing differs); 0 leaves controller-runtime's default of 10h")
	f.BoolVar(&o.NetworkPolicy, "network-policy", false, "render a NetworkPolicy for the bus pods of every Tenant that does not set spec.networkPolicy.enabled")
	f.StringVar(&o.NetworkPolicyPublishNamespaces, "network-policy-publish-namespaces", "", "label selector of the namespaces (the platform's gateway or ingress) whose pods may reach the publish port of Tenants that set no spec.networkPolicy.publishFrom, e.g. kubernetes.io/metadata.name=gateway-system; empty allows the Tenant's own namespace only")
	f.StringVar(&o.NetworkPolicyMonitoringNamespace, "network-policy-monitoring-namespace", controllers.DefaultMonitoringNamespace, "namespace whose pods may reach the bus pods' operations port (/metrics, /healthz, /readyz)")
	f.StringVar(&o.NetworkPolicyDNSNamespace, "network-policy-dns-namespace", controllers.DefaultDNSNamespace, "namespace of the cluster DNS, the only destination of the bus pods' DNS egress")
	f.StringVar(&o.NetworkPolicyDNSPods, "network-policy-dns-pods", "k8s-app=kube-dns", "labels (k=v,…) of the cluster DNS's pods in --network-policy-dns-namespace; empty takes k8s-app=kube-dns")
	f.StringVar(&o.OperatorNamespace, "operator-namespace", "", "the operator's own namespace, whose pods may reach the bus pods' operations port too")
	f.StringVar(&o.ExposeGateway, "expose-gateway", "", "the platform's Gateway (namespace/name) that the HTTPRoute of a Tenant whose spec.expose.gateway names no parentRefs attaches to")
	f.StringSliceVar(&o.TrustedProxies, "trusted-proxies", nil, "CIDRs of the proxies (the Gateway's or ingress controller's pods) whose X-Forwarded-For the bus pods of Tenants that set no spec.trustedProxies believe; empty trusts none")
	f.BoolVar(&o.PodMonitor, "pod-monitor", false, "write a Prometheus Operator PodMonitor scraping the bus pods of every Tenant that does not set spec.monitoring.podMonitor.enabled (where the cluster serves monitoring.coreos.com/v1 PodMonitor)")
	f.StringVar(&o.PodMonitorInterval, "pod-monitor-interval", "", "scrape interval of the PodMonitors of Tenants that set none, e.g. 30s; empty leaves it to Prometheus")
	f.StringToStringVar(&o.PodMonitorLabels, "pod-monitor-labels", nil, "labels of every PodMonitor, those the platform's Prometheus selects PodMonitors by, e.g. release=kube-prometheus-stack")
	f.StringArrayVar(&o.BusEnv, "bus-env", nil, "an OpenTelemetry variable NAME=VALUE (OTEL_* only) of every bus container, such as OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 (repeatable; a Tenant's spec.template.pod.env wins by name)")
	bindLogFlags(cmd, &o.LogFormat, &o.LogLevel)
}

// busEnv reads --bus-env: NAME=VALUE pairs of OTEL_* variables.
func (o *OperatorOptions) busEnv() ([]corev1.EnvVar, error) {
	var out []corev1.EnvVar
	for _, kv := range o.BusEnv {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "OTEL_") {
			return nil, usageError{fmt.Errorf("--bus-env: %q is not OTEL_NAME=VALUE; only OpenTelemetry's variables can be set on the bus", kv)}
		}
		out = append(out, corev1.EnvVar{Name: name, Value: value})
	}
	return out, nil
}

// DefaultMaxConcurrentReconciles is --max-concurrent-reconciles' default,
// chosen by measurement (docs/performance.md, "Operator at scale" and
// "Eight workers: the operator keeps pace with a bulk"): a reconcile waits
// mostly on the API server or the NATS cluster, and with four a bulk of
// Tenants queued behind its creates.
const DefaultMaxConcurrentReconciles = 8

// Default requests of bus containers whose Tenant sets no spec.resources:
// what one bus with embedded JetStream uses at rest, so that the scheduler
// counts it.
const (
	DefaultBusCPURequest    = "100m"
	DefaultBusMemoryRequest = "256Mi"
	// DefaultBusMemoryLimit keeps a runaway bus from pressing on its node:
	// an idle bus is about 80 MiB, one evaluation of a workspace's Rego at
	// most about 320 MiB.
	DefaultBusMemoryLimit = "1Gi"
)

// busResources are the requests and limits the flags give bus containers.
func (o *OperatorOptions) busResources() (corev1.ResourceRequirements, error) {
	var rr corev1.ResourceRequirements
	for _, r := range []struct {
		flag, value string
		name        corev1.ResourceName
	}{{"--bus-cpu-request", o.BusCPURequest, corev1.ResourceCPU}, {"--bus-memory-request", o.BusMemoryRequest, corev1.ResourceMemory}} {
		if r.value == "" {
			continue
		}
		q, err := resource.ParseQuantity(r.value)
		if err != nil {
			return rr, usageError{fmt.Errorf("%s %q: not a Kubernetes quantity such as 100m or 256Mi", r.flag, r.value)}
		}
		if rr.Requests == nil {
			rr.Requests = corev1.ResourceList{}
		}
		rr.Requests[r.name] = q
	}
	if o.BusMemoryLimit != "" {
		q, err := resource.ParseQuantity(o.BusMemoryLimit)
		if err != nil {
			return rr, usageError{fmt.Errorf("--bus-memory-limit %q: not a Kubernetes quantity such as 1Gi", o.BusMemoryLimit)}
		}
		if req, ok := rr.Requests[corev1.ResourceMemory]; ok && req.Cmp(q) > 0 {
			return rr, usageError{fmt.Errorf("--bus-memory-limit %s is below --bus-memory-request %s", o.BusMemoryLimit, o.BusMemoryRequest)}
		}
		rr.Limits = corev1.ResourceList{corev1.ResourceMemory: q}
	}
	return rr, nil
}

// scrapeInterval is what a PodMonitor's interval may be (the pattern of
// Tenant spec.monitoring.podMonitor.interval), or empty.
var scrapeInterval = regexp.MustCompile(`^$|^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)

func (o *OperatorOptions) validate() error {
	if _, err := o.busResources(); err != nil {
		return err
	}
	if o.MaxConcurrentReconciles < 1 {
		return usageError{fmt.Errorf("--max-concurrent-reconciles must be at least 1")}
	}
	for _, ns := range o.WatchNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return usageError{fmt.Errorf("--watch-namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))}
		}
	}
	if _, err := metav1.ParseToLabelSelector(o.NetworkPolicyPublishNamespaces); err != nil {
		return usageError{fmt.Errorf("--network-policy-publish-namespaces: %w", err)}
	}
	if _, err := o.exposeGateway(); err != nil {
		return err
	}
	for _, c := range o.TrustedProxies {
		if _, err := netip.ParsePrefix(c); err != nil {
			return usageError{fmt.Errorf("--trusted-proxies: %q is not a CIDR such as 10.0.0.0/8", c)}
		}
	}
	if _, err := o.busEnv(); err != nil {
		return err
	}
	if !scrapeInterval.MatchString(o.PodMonitorInterval) {
		return usageError{fmt.Errorf("--pod-monitor-interval: %q is not a duration such as 30s or 1m30s", o.PodMonitorInterval)}
	}
	for k, v := range o.PodMonitorLabels {
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			return usageError{fmt.Errorf("--pod-monitor-labels: %s=%s: %s", k, v, strings.Join(errs, "; "))}
		}
	}
	return validateLogFlags(o.LogFormat, o.LogLevel)
}

// exposeGateway is --expose-gateway as a parent reference; nil when unset.
func (o *OperatorOptions) exposeGateway() (*v1alpha1.GatewayParentRef, error) {
	if o.ExposeGateway == "" {
		return nil, nil
	}
	ns, name, found := strings.Cut(o.ExposeGateway, "/")
	if !found {
		ns, name = "", o.ExposeGateway
	}
	for _, part := range []string{ns, name} {
		if part == "" && found {
			return nil, usageError{fmt.Errorf("--expose-gateway %q: want namespace/name", o.ExposeGateway)}
		}
		if errs := validation.IsDNS1123Subdomain(part); part != "" && len(errs) > 0 {
			return nil, usageError{fmt.Errorf("--expose-gateway %q: %s", o.ExposeGateway, strings.Join(errs, "; "))}
		}
	}
	return &v1alpha1.GatewayParentRef{Namespace: ns, Name: name}, nil
}

func newOperatorCommand() *cobra.Command {
	o := &OperatorOptions{}
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the operator: reconcile Tenants, Connections, Grants, OwnershipPolicies and BusPools into running buses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			h := newLogHandler(cmd.ErrOrStderr(), o.LogFormat, o.LogLevel)
			cfg, err := restConfig(o.Kubeconfig)
			if err != nil {
				return err
			}
			return RunOperator(cmd.Context(), *o, cfg, logr.FromSlogHandler(h))
		},
	}
	o.bind(cmd)
	readEnv(cmd)
	return cmd
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		// As ctrl.GetConfig does: the API server's priority and fairness
		// limits the operator, not client-go's default of 5 requests/s,
		// which would hold a large cluster's reconciles back by minutes.
		if cfg.QPS == 0 {
			cfg.QPS = -1
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes configuration: %w", err)
	}
	return cfg, nil
}

// metricsOptions serve the metrics as --metrics-secure says: over HTTPS
// behind the API server's authentication and authorisation, so that only
// a client granted get on /metrics (the chart's metrics-reader
// ClusterRole) reads them.
func metricsOptions(o OperatorOptions) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsBindAddress}
	if o.MetricsSecure {
		m.SecureServing = true
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
		m.CertDir = o.MetricsCertDir
	}
	return m
}

// RunOperator runs the operator's manager against the cluster of cfg until
// ctx ends.
func RunOperator(ctx context.Context, o OperatorOptions, cfg *rest.Config, log logr.Logger) error {
	// A refused flag returns before the process-wide loggers are touched:
	// they outlive this call, and a caller's logger must not be left
	// behind in them by a run that never started.
	limit, err := applyMemoryLimit(o.MemoryLimit)
	if err != nil {
		return usageError{err}
	}
	if log.GetSink() == nil {
		// logr.Discard has no sink, and a slog handler made from it panics
		// on its first record; discard through slog instead.
		log = logr.FromSlogHandler(slog.DiscardHandler)
	}
	log = logr.FromSlogHandler(quietStop{Handler: logr.ToSlogHandler(log), stopping: ctx.Done()})
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	if limit > 0 {
		log.Info("Go memory limit set", "bytes", limit, "from", "--memory-limit")
	}
	cfg = rest.CopyConfig(cfg)
	// A kubeconfig that disables compression keeps it disabled.
	cfg.DisableCompression = cfg.DisableCompression || !o.APICompression
	scheme, err := controllers.NewScheme()
	if err != nil {
		return err
	}
	cacheOptions := controllers.CacheOptions(o.WatchNamespaces...)
	if o.SyncPeriod > 0 {
		cacheOptions.SyncPeriod = &o.SyncPeriod
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 controllers.LogSpecErrorsAsInfo(log),
		Cache:                  cacheOptions,
		MapperProvider:         controllers.NewRESTMapper,
		Metrics:                metricsOptions(o),
		HealthProbeBindAddress: o.HealthProbeBindAddress,
		PprofBindAddress:       o.PprofBindAddress,
		// Controller names are checked for uniqueness across the process;
		// RunOperator may run more than once in one process (the chart's
		// tests run two releases' operators one after the other), and one
		// manager's kinds are distinct by construction. The work queues
		// are client-go's rate-limited queues, not controller-runtime's
		// priority queue (its default since v0.23): at 100 Tenants under
		// load, Grants that asked to be reconciled again later were, with
		// the priority queue, never reconciled again.
		Controller:                    ctrlconfig.Controller{MaxConcurrentReconciles: o.MaxConcurrentReconciles, SkipNameValidation: new(true), UsePriorityQueue: new(false)},
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       cmp.Or(o.LeaderElectionNamespace, o.OperatorNamespace),
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("operator manager: %w", err)
	}
	busResources, err := o.busResources()
	if err != nil {
		return err
	}
	np := controllers.NetworkPolicyOptions{
		Enabled:             o.NetworkPolicy,
		MonitoringNamespace: o.NetworkPolicyMonitoringNamespace,
		OperatorNamespace:   o.OperatorNamespace,
		DNSNamespace:        o.NetworkPolicyDNSNamespace,
	}
	if o.NetworkPolicyDNSPods != "" {
		if np.DNSPods, err = labels.ConvertSelectorToLabelsMap(o.NetworkPolicyDNSPods); err != nil {
			return usageError{fmt.Errorf("--network-policy-dns-pods %q: want labels such as k8s-app=kube-dns", o.NetworkPolicyDNSPods)}
		}
	}
	if o.NetworkPolicyPublishNamespaces != "" {
		if np.PublishNamespaces, err = metav1.ParseToLabelSelector(o.NetworkPolicyPublishNamespaces); err != nil {
			return usageError{fmt.Errorf("--network-policy-publish-namespaces: %w", err)}
		}
	}
	gateway, err := o.exposeGateway()
	if err != nil {
		return err
	}
	busEnv, err := o.busEnv()
	if err != nil {
		return err
	}
	if err := controllers.Setup(mgr, controllers.Options{
		Expose:          controllers.ExposeOptions{Gateway: gateway},
		TrustedProxies:  o.TrustedProxies,
		BusImage:        o.BusImage,
		BusPlatformUID:  o.BusPlatformUID,
		BusResources:    busResources,
		BusEnv:          busEnv,
		ClusterDomain:   o.ClusterDomain,
		NetworkPolicy:   np,
		WatchNamespaces: o.WatchNamespaces,
		Monitoring:      controllers.MonitoringOptions{PodMonitor: o.PodMonitor, Interval: o.PodMonitorInterval, Labels: o.PodMonitorLabels},
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.Add(releaseStartPages{cache: mgr.GetCache(), log: log}); err != nil {
		return err
	}
	build := buildinfo.Get()
	log.Info("storybus operator starting", "version", build.Version, "commit", build.Commit, "goVersion", build.GoVersion, "busImage", o.BusImage, "leaderElect", o.LeaderElect, "watchNamespaces", o.WatchNamespaces, "metricsSecure", o.MetricsSecure)
	return mgr.Start(ctx)
}

// releaseStartPages unmaps, once the manager's cache has synced, the
// pages of the binary only the operator's start touched (package
// startpages: every package's initialiser, the bus's included, and the
// manager's set-up), and drops them from the page cache (startpages.Evict);
// the pages the reconcilers go on using are read back a page at a time
// as they run. Every replica does, leader or not.
type releaseStartPages struct {
	cache interface {
		WaitForCacheSync(context.Context) bool
	}
	log logr.Logger
}

// Start implements manager.Runnable.
func (r releaseStartPages) Start(ctx context.Context) error {
	if !r.cache.WaitForCacheSync(ctx) {
		return nil
	}
	unmapStartPages(slog.New(logr.ToSlogHandler(r.log)), startpages.Evict)
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (releaseStartPages) NeedLeaderElection() bool { return false }
