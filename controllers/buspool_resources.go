package controllers

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	gatewayv1ac "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// LabelPool names the BusPool an object belongs to: the pool's
// StatefulSet, Services, PodDisruptionBudget and pods.
const LabelPool = "bus.storybus.io/pool"

// poolComponent is the app.kubernetes.io/component of a pool's objects.
const poolComponent = "pool"

// poolShutdown is what a stopping replica takes after its drain period to
// finish the requests in progress (serve's shutdown timeout), and
// poolGraceMargin what the pods' termination grace period adds to both:
// the store's close and the process's exit.
const (
	poolShutdown    = 15 * time.Second
	poolGraceMargin = 10 * time.Second
)

// defaultDrainPeriod is serve's --drain-period default.
const defaultDrainPeriod = 5 * time.Second

// Names of the objects the operator makes for BusPool p: the StatefulSet,
// its HTTP Service, PodDisruptionBudget, HTTPRoute or Ingress are
// <p>-pool, the headless operations Service <p>-pool-ops, and the pods
// <p>-pool-0, <p>-pool-1, … . A StatefulSet, not a Deployment: its pods'
// names, which are the replicas' names in the status bucket, stay the same
// across restarts, so the bucket holds one key per workspace and replica
// however often the pool rolls.
func poolObjectName(p *v1alpha1.BusPool) string { return p.Name + "-pool" }
func poolOpsName(p *v1alpha1.BusPool) string    { return p.Name + "-pool-ops" }

// poolSelectorLabels select a pool's pods.
func poolSelectorLabels(p *v1alpha1.BusPool) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":      "storybus",
		"app.kubernetes.io/component": poolComponent,
		"app.kubernetes.io/instance":  p.Name,
	}
}

// poolLabels are on every object made for a pool, pods included.
func poolLabels(p *v1alpha1.BusPool) map[string]string {
	l := poolSelectorLabels(p)
	l[LabelManagedBy] = FieldManager
	l[LabelPool] = p.Name
	return l
}

func poolOwnerRef(p *v1alpha1.BusPool) *metav1ac.OwnerReferenceApplyConfiguration {
	return controllerRef("BusPool", p.Name, p.UID)
}

// poolFront is what the objects in front of the pool's replicas are made
// from: its route and Ingress send every workspace's path to them.
func poolFront(p *v1alpha1.BusPool) busFront {
	return busFront{
		name: poolObjectName(p), opsName: poolOpsName(p), namespace: p.Namespace,
		labels: poolLabels(p), selector: poolSelectorLabels(p), owner: poolOwnerRef(p),
		pathPrefix: poolPathPrefix,
	}
}

// poolEndpoint is the in-cluster base URL of the pool's publish API.
func poolEndpoint(p *v1alpha1.BusPool, clusterDomain string) string {
	scheme := "http"
	if p.Spec.TLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s.%s.svc.%s:%d", scheme, poolObjectName(p), p.Namespace, clusterDomain, HTTPPort)
}

// poolExternalEndpoint is the base URL producers outside the cluster use
// through spec.expose: the Ingress's host, or the route's first host name
// that is not a wildcard; "" without one.
func poolExternalEndpoint(p *v1alpha1.BusPool) string {
	switch ex := p.Spec.Expose; {
	case ex == nil:
	case ex.Ingress != nil:
		return "https://" + ex.Ingress.Host
	case ex.Gateway != nil:
		for _, h := range ex.Gateway.Hostnames {
			if !strings.HasPrefix(h, "*") {
				return "https://" + h
			}
		}
	}
	return ""
}

// poolMinReady is how long a replica started by a rolling update must be
// ready before the next replica is stopped.
const poolMinReady = 5 * time.Second

// poolDrainPeriod is spec.drainPeriod, serve's default when unset.
func poolDrainPeriod(p *v1alpha1.BusPool) time.Duration {
	if p.Spec.DrainPeriod == nil {
		return defaultDrainPeriod
	}
	return p.Spec.DrainPeriod.Duration
}

// poolGracePeriod is the pods' terminationGracePeriodSeconds: the drain,
// the shutdown and the margin, so that kubelet never kills a replica that
// is still finishing its requests.
func poolGracePeriod(p *v1alpha1.BusPool) int64 {
	return int64((poolDrainPeriod(p) + poolShutdown + poolGraceMargin + time.Second - 1) / time.Second)
}

// poolArgs are the arguments of `storybus` in a pool replica.
func poolArgs(p *v1alpha1.BusPool, trustedProxies []string) []string {
	args := []string{
		"serve",
		"--nats-url", p.Spec.NATS.URL,
		"--replicas", strconv.Itoa(int(p.EffectiveStreamReplicas())),
		"--pool", p.PoolName(),
		// The pod's name, from the downward API: the replica's name in
		// the pool's status bucket, which the operator reads by pod.
		"--pool-replica", "$(" + podNameEnv + ")",
		"--listen", ":" + strconv.Itoa(HTTPPort),
		"--ops-listen", ":" + strconv.Itoa(OpsPort),
		"--log-format", "json",
		"--drain-period", poolDrainPeriod(p).String(),
	}
	if ref := p.Spec.NATS.CredentialsSecretRef; ref != nil {
		args = append(args, "--nats-credentials", NATSCredsDir+"/"+natsCredsKey(ref))
	}
	if b := p.SharedRecordsMaxBytes(); b > 0 {
		args = append(args, "--shared-records-max-bytes", strconv.FormatInt(b, 10))
	}
	if len(p.Spec.TrustedProxies) > 0 {
		trustedProxies = p.Spec.TrustedProxies
	}
	if len(trustedProxies) > 0 {
		args = append(args, "--trusted-proxies", strings.Join(trustedProxies, ","))
	}
	if p.Spec.TLS != nil {
		args = append(args, "--tls-cert-file", TLSDir+"/"+corev1.TLSCertKey, "--tls-key-file", TLSDir+"/"+corev1.TLSPrivateKeyKey)
	}
	return args
}

// podNameEnv carries the pod's name into the bus container.
const podNameEnv = "POD_NAME"

// desiredPoolStatefulSet runs the pool's replicas. Nothing in the pod
// template depends on the Tenants placed on the pool: they reach the
// replicas through the pool's bucket, so placing, changing or removing one
// restarts nothing.
func desiredPoolStatefulSet(p *v1alpha1.BusPool, o Options) *appsv1ac.StatefulSetApplyConfiguration {
	image := o.BusImage
	if p.Spec.Image != "" {
		image = p.Spec.Image
	}
	mounts := []*corev1ac.VolumeMountApplyConfiguration{corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp")}
	volumes := []*corev1ac.VolumeApplyConfiguration{corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource())}
	if ref := p.Spec.NATS.CredentialsSecretRef; ref != nil {
		mounts = append(mounts, corev1ac.VolumeMount().WithName("nats-credentials").WithMountPath(NATSCredsDir).WithReadOnly(true))
		volumes = append(volumes, corev1ac.Volume().WithName("nats-credentials").
			WithSecret(corev1ac.SecretVolumeSource().WithSecretName(ref.Name).
				WithItems(corev1ac.KeyToPath().WithKey(natsCredsKey(ref)).WithPath(natsCredsKey(ref)))))
	}
	if tls := p.Spec.TLS; tls != nil {
		mounts = append(mounts, corev1ac.VolumeMount().WithName(tlsVolume).WithMountPath(TLSDir).WithReadOnly(true))
		volumes = append(volumes, corev1ac.Volume().WithName(tlsVolume).
			WithSecret(corev1ac.SecretVolumeSource().WithSecretName(tls.SecretName).WithDefaultMode(0o440).WithItems(
				corev1ac.KeyToPath().WithKey(corev1.TLSCertKey).WithPath(corev1.TLSCertKey),
				corev1ac.KeyToPath().WithKey(corev1.TLSPrivateKeyKey).WithPath(corev1.TLSPrivateKeyKey))))
	}

	probe := func(path string, period, failures int32) *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().
			WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString("ops"))).
			WithPeriodSeconds(period).WithFailureThreshold(failures)
	}
	container := corev1ac.Container().
		WithName(busContainer).
		WithImage(image).
		WithCommand("storybus").
		WithArgs(poolArgs(p, o.TrustedProxies)...).
		WithPorts(
			corev1ac.ContainerPort().WithName("http").WithContainerPort(HTTPPort).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName("ops").WithContainerPort(OpsPort).WithProtocol(corev1.ProtocolTCP),
		).
		// A replica is ready once it serves the pool's workspaces (at
		// least one), and not ready from the moment it is told to stop:
		// it drains (docs/pools.md).
		WithReadinessProbe(probe("/readyz", 5, 3)).
		WithLivenessProbe(probe("/healthz", 10, 6)).
		WithStartupProbe(probe("/healthz", 2, 60)).
		WithVolumeMounts(mounts...).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithRunAsNonRoot(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL"))).
		WithEnv(corev1ac.EnvVar().WithName(podNameEnv).WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("metadata.name"))))
	env := poolEnv(p, o)
	if rr := poolResources(p, o); rr != nil {
		container = container.WithResources(rr)
		if rr.Limits != nil && hasKey(*rr.Limits, corev1.ResourceMemory) && !slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == memoryLimitEnv }) {
			container = container.WithEnv(corev1ac.EnvVar().WithName(memoryLimitEnv).WithValueFrom(corev1ac.EnvVarSource().
				WithResourceFieldRef(corev1ac.ResourceFieldSelector().WithContainerName(busContainer).WithResource("limits.memory"))))
		}
	}
	for _, e := range env {
		container = container.WithEnv(toApplyConfiguration[corev1ac.EnvVarApplyConfiguration](&e))
	}

	podSpec := corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(poolGracePeriod(p)).
		WithSecurityContext(podSecurityContext(o.BusPlatformUID)).
		WithContainers(container).
		WithVolumes(volumes...)
	pod := corev1ac.PodTemplateSpec()
	var tpl *v1alpha1.PodTemplate
	if p.Spec.Template != nil {
		tpl = p.Spec.Template.Pod
	}
	if tpl != nil {
		if md := tpl.Metadata; md != nil {
			pod = pod.WithLabels(maps.Clone(md.Labels)).WithAnnotations(maps.Clone(md.Annotations))
		}
		podSpec = withPodTemplate(podSpec, tpl)
	}
	if tpl == nil || len(tpl.TopologySpreadConstraints) == 0 {
		// One replica per node where the nodes allow it, and across zones
		// as far as they go: a node or a zone lost takes as few replicas
		// as can be.
		sel := metav1ac.LabelSelector().WithMatchLabels(poolSelectorLabels(p))
		podSpec = podSpec.WithTopologySpreadConstraints(
			corev1ac.TopologySpreadConstraint().WithMaxSkew(1).WithTopologyKey(corev1.LabelHostname).
				WithWhenUnsatisfiable(corev1.DoNotSchedule).WithLabelSelector(sel),
			corev1ac.TopologySpreadConstraint().WithMaxSkew(1).WithTopologyKey(corev1.LabelTopologyZone).
				WithWhenUnsatisfiable(corev1.ScheduleAnyway).WithLabelSelector(sel),
		)
	}
	pod = pod.WithLabels(poolLabels(p)).WithSpec(podSpec)

	return appsv1ac.StatefulSet(poolObjectName(p), p.Namespace).
		WithLabels(poolLabels(p)).
		WithOwnerReferences(poolOwnerRef(p)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(p.EffectiveReplicas()).
			WithServiceName(poolOpsName(p)).
			// The replicas start together: a replica of an empty pool is
			// not ready, and an ordered start would wait for it.
			WithPodManagementPolicy(appsv1.ParallelPodManagement).
			// A new image or template rolls the replicas one at a time,
			// from the highest ordinal down: the next is stopped only once
			// the one replaced is ready and has stayed ready for
			// poolMinReady, long enough for the Service's endpoints to
			// carry it, while the stopped one drains.
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().
				WithType(appsv1.RollingUpdateStatefulSetStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateStatefulSetStrategy().WithPartition(0))).
			WithMinReadySeconds(int32(poolMinReady / time.Second)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(poolSelectorLabels(p))).
			WithTemplate(pod))
}

// poolResources are the bus container's requests and limits: the pool's
// spec.resources, else the operator's defaults; nil when both are empty.
// The lists are deep copies, as busResources' are.
func poolResources(p *v1alpha1.BusPool, o Options) *corev1ac.ResourceRequirementsApplyConfiguration {
	res := &p.Spec.Resources
	if len(res.Limits) == 0 && len(res.Requests) == 0 {
		res = &o.BusResources
	}
	if len(res.Limits) == 0 && len(res.Requests) == 0 {
		return nil
	}
	res = res.DeepCopy()
	rr := corev1ac.ResourceRequirements()
	if len(res.Limits) > 0 {
		rr = rr.WithLimits(res.Limits)
	}
	if len(res.Requests) > 0 {
		rr = rr.WithRequests(res.Requests)
	}
	return rr
}

// poolEnv is the bus container's OpenTelemetry environment: the
// operator's --bus-env the pool's template does not name, then the
// template's own.
func poolEnv(p *v1alpha1.BusPool, o Options) []corev1.EnvVar {
	var own []corev1.EnvVar
	if p.Spec.Template != nil && p.Spec.Template.Pod != nil {
		own = p.Spec.Template.Pod.Env
	}
	var out []corev1.EnvVar
	for _, e := range o.BusEnv {
		if !slices.ContainsFunc(own, func(x corev1.EnvVar) bool { return x.Name == e.Name }) {
			out = append(out, e)
		}
	}
	return append(out, own...)
}

// desiredPoolService serves the pool's publish API: every placed
// workspace, under its path.
func desiredPoolService(p *v1alpha1.BusPool) *corev1ac.ServiceApplyConfiguration {
	return poolFront(p).httpService()
}

// desiredPoolOpsService is the pool's headless operations Service.
func desiredPoolOpsService(p *v1alpha1.BusPool) *corev1ac.ServiceApplyConfiguration {
	return poolFront(p).opsService()
}

// desiredPoolPDB lets one replica at a time be evicted.
func desiredPoolPDB(p *v1alpha1.BusPool) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return poolFront(p).pdb()
}

// poolPathPrefix is the path prefix a pool's route sends to it: every
// workspace's routes, each under /v1/tenants/<workspace>/.
const poolPathPrefix = "/v1/tenants/"

// desiredPoolHTTPRoute sends /v1/tenants/ to the pool's Service.
func desiredPoolHTTPRoute(p *v1alpha1.BusPool, parents []v1alpha1.GatewayParentRef) *gatewayv1ac.HTTPRouteApplyConfiguration {
	return poolFront(p).httpRoute(parents, p.Spec.Expose.Gateway.Hostnames)
}

// desiredPoolIngress is the Ingress of /v1/tenants/ on the pool's host.
func desiredPoolIngress(p *v1alpha1.BusPool) *networkingv1ac.IngressApplyConfiguration {
	secret := ""
	if p.Spec.TLS != nil {
		secret = p.Spec.TLS.SecretName
	}
	return poolFront(p).ingress(p.Spec.Expose.Ingress, secret)
}
