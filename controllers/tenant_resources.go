package controllers

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// Labels on everything the operator makes for a Tenant.
const (
	// LabelManagedBy is app.kubernetes.io/managed-by; its value is
	// FieldManager.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelTenant names the Tenant an object belongs to.
	LabelTenant = "bus.storybus.io/tenant"
)

// Where the bus pods find things, and the ports they serve.
const (
	// ConfigDir is where the ConfigMap with the workspace configuration and
	// the Tenant's Secret (the signing key, IAM secret access keys) are
	// mounted, as one projected volume: kubelet swaps both in a single
	// atomic "..data" symlink swap, so the bus's watch on this directory
	// sees every change of either, and never a configuration naming a key
	// file that is not there yet.
	ConfigDir = "/etc/storybus/config"
	// ConfigFile is the configuration's key in the ConfigMap and its file
	// name in ConfigDir.
	ConfigFile = "workspace.yaml"
	// SigningKeyKey is the signing key's key in the Tenant's Secret and its
	// file name in ConfigDir.
	SigningKeyKey = "signingKey"
	// DataDir is where the embedded JetStream stores, on the pod's volume.
	DataDir = "/var/lib/storybus"
	// NATSCredsDir is where an external cluster's credentials file is
	// mounted.
	NATSCredsDir = "/etc/storybus/nats"
	// HTTPPort serves the publish API.
	HTTPPort = 8080
	// OpsPort serves /healthz, /readyz and /metrics.
	OpsPort = 8081

	busContainer = "bus"
	// memoryLimitEnv passes the bus container's memory limit to
	// storybus serve's --memory-limit.
	memoryLimitEnv = "STORYBUS_MEMORY_LIMIT"
	dataVolume     = "data"
	defaultStorage = "10Gi"
	busUID         = 65532
)

// Names of the objects the operator makes for Tenant t. The bus pods are
// <t>-bus-0, <t>-bus-1, …; with embedded storage their volumes are
// data-<t>-bus-0, ….
func busName(t *v1alpha1.Tenant) string        { return t.Name + "-bus" }
func opsServiceName(t *v1alpha1.Tenant) string { return t.Name + "-bus-ops" }
func configMapName(t *v1alpha1.Tenant) string  { return t.Name + "-bus-config" }
func signingKeyName(t *v1alpha1.Tenant) string { return t.Name + "-bus-signing-key" }

// selectorLabels select a Tenant's bus pods.
func selectorLabels(t *v1alpha1.Tenant) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":      "storybus",
		"app.kubernetes.io/component": "bus",
		"app.kubernetes.io/instance":  t.Name,
	}
}

// tenantLabels are on every object made for a Tenant, pods included.
func tenantLabels(t *v1alpha1.Tenant) map[string]string {
	l := selectorLabels(t)
	l[LabelManagedBy] = FieldManager
	l[LabelTenant] = t.Name
	return l
}

// endpoint is the in-cluster base URL of the Tenant's publish API.
func endpoint(t *v1alpha1.Tenant, clusterDomain string) string {
	scheme := "http"
	if t.Spec.TLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s.%s.svc.%s:%d", scheme, busName(t), t.Namespace, clusterDomain, HTTPPort)
}

func ownerRef(t *v1alpha1.Tenant) *metav1ac.OwnerReferenceApplyConfiguration {
	return controllerRef("Tenant", t.Name, t.UID)
}

// tenantFront is what the objects in front of the Tenant's bus pods are
// made from.
func tenantFront(t *v1alpha1.Tenant) busFront {
	return busFront{
		name: busName(t), opsName: opsServiceName(t), namespace: t.Namespace,
		labels: tenantLabels(t), selector: selectorLabels(t), owner: ownerRef(t),
		pathPrefix: v1alpha1.TenantPathPrefix(t.EffectiveWorkspaceID()),
	}
}

// desiredConfigMap holds the compiled workspace configuration.
func desiredConfigMap(t *v1alpha1.Tenant, workspaceYAML []byte, hash string) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(configMapName(t), t.Namespace).
		WithLabels(tenantLabels(t)).
		WithAnnotations(map[string]string{v1alpha1.AnnotationConfigHash: hash}).
		WithOwnerReferences(ownerRef(t)).
		WithData(map[string]string{ConfigFile: string(workspaceYAML)})
}

// desiredHTTPService serves the publish API (status.endpoint).
func desiredHTTPService(t *v1alpha1.Tenant) *corev1ac.ServiceApplyConfiguration {
	return tenantFront(t).httpService()
}

// desiredOpsService is the Tenant's headless operations Service.
func desiredOpsService(t *v1alpha1.Tenant) *corev1ac.ServiceApplyConfiguration {
	return tenantFront(t).opsService()
}

// desiredPDB lets one bus pod at a time be evicted.
func desiredPDB(t *v1alpha1.Tenant) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return tenantFront(t).pdb()
}

// busArgs are the arguments of `storybus` in a bus pod; trustedProxies
// are the operator's default of spec.trustedProxies.
func busArgs(t *v1alpha1.Tenant, trustedProxies []string) []string {
	args := []string{
		"serve",
		"--config", ConfigDir + "/" + ConfigFile,
		"--listen", ":" + strconv.Itoa(HTTPPort),
		"--ops-listen", ":" + strconv.Itoa(OpsPort),
		"--log-format", "json",
	}
	if len(t.Spec.TrustedProxies) > 0 {
		trustedProxies = t.Spec.TrustedProxies
	}
	if len(trustedProxies) > 0 {
		args = append(args, "--trusted-proxies", strings.Join(trustedProxies, ","))
	}
	st := t.Spec.Storage
	if st != nil && st.External != nil {
		ext := st.External
		replicas := ext.Replicas
		if replicas == 0 {
			replicas = 3
		}
		args = append(args, "--nats-url", ext.URL, "--replicas", strconv.Itoa(int(replicas)))
		if ref := ext.CredentialsSecretRef; ref != nil {
			args = append(args, "--nats-credentials", NATSCredsDir+"/"+natsCredsKey(ref))
		}
		return args
	}
	sync := v1alpha1.SyncAlways
	if st != nil && st.Embedded != nil && st.Embedded.Sync != "" {
		sync = st.Embedded.Sync
	}
	return append(args, "--data-dir", DataDir, "--sync", sync)
}

func natsCredsKey(ref *v1alpha1.SecretKeyReference) string {
	if ref.Key != "" {
		return ref.Key
	}
	return "nats.creds"
}

// desiredStatefulSet runs the bus pods. Nothing in the pod template depends
// on the workspace configuration, so a configuration change never restarts
// a pod: the bus reloads the mounted file.
func desiredStatefulSet(t *v1alpha1.Tenant, o Options) *appsv1ac.StatefulSetApplyConfiguration {
	image := o.BusImage
	if t.Spec.Image != "" {
		image = t.Spec.Image
	}
	mounts := []*corev1ac.VolumeMountApplyConfiguration{
		corev1ac.VolumeMount().WithName("config").WithMountPath(ConfigDir).WithReadOnly(true),
		corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
	}
	volumes := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName("config").WithProjected(corev1ac.ProjectedVolumeSource().
			WithDefaultMode(0o440).
			WithSources(
				corev1ac.VolumeProjection().WithConfigMap(corev1ac.ConfigMapProjection().WithName(configMapName(t))),
				corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().WithName(signingKeyName(t))),
			)),
		corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
	}
	spec := appsv1ac.StatefulSetSpec().
		WithReplicas(t.EffectiveReplicas()).
		WithServiceName(opsServiceName(t)).
		WithPodManagementPolicy(appsv1.ParallelPodManagement).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(t)))

	st := t.Spec.Storage
	if st == nil || st.External == nil {
		size := resource.MustParse(defaultStorage)
		var class *string
		if st != nil && st.Embedded != nil {
			if st.Embedded.Size != nil {
				size = *st.Embedded.Size
			}
			class = st.Embedded.StorageClassName
		}
		pvc := corev1ac.PersistentVolumeClaimSpec().
			WithAccessModes(corev1.ReadWriteOnce).
			WithResources(corev1ac.VolumeResourceRequirements().WithRequests(corev1.ResourceList{corev1.ResourceStorage: size}))
		if class != nil {
			pvc = pvc.WithStorageClassName(*class)
		}
		whenDeleted := appsv1.RetainPersistentVolumeClaimRetentionPolicyType
		if t.EffectiveDeletionPolicy() == v1alpha1.DeletionPolicyDelete {
			whenDeleted = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
		}
		spec = spec.
			WithVolumeClaimTemplates(corev1ac.PersistentVolumeClaim(dataVolume, "").
				WithLabels(selectorLabels(t)).
				WithSpec(pvc)).
			WithPersistentVolumeClaimRetentionPolicy(appsv1ac.StatefulSetPersistentVolumeClaimRetentionPolicy().
				WithWhenDeleted(whenDeleted).
				WithWhenScaled(appsv1.RetainPersistentVolumeClaimRetentionPolicyType))
		mounts = append(mounts, corev1ac.VolumeMount().WithName(dataVolume).WithMountPath(DataDir))
	} else if ref := st.External.CredentialsSecretRef; ref != nil {
		mounts = append(mounts, corev1ac.VolumeMount().WithName("nats-credentials").WithMountPath(NATSCredsDir).WithReadOnly(true))
		volumes = append(volumes, corev1ac.Volume().WithName("nats-credentials").
			WithSecret(corev1ac.SecretVolumeSource().WithSecretName(ref.Name).
				WithItems(corev1ac.KeyToPath().WithKey(natsCredsKey(ref)).WithPath(natsCredsKey(ref)))))
	}

	tlsVolumes, tlsVolumeMounts := tlsMounts(t)
	volumes, mounts = append(volumes, tlsVolumes...), append(mounts, tlsVolumeMounts...)

	probe := func(path string, period, failures int32) *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().
			WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString("ops"))).
			WithPeriodSeconds(period).WithFailureThreshold(failures)
	}
	container := corev1ac.Container().
		WithName(busContainer).
		WithImage(image).
		WithCommand("storybus").
		WithArgs(append(busArgs(t, o.TrustedProxies), tlsArgs(t)...)...).
		WithPorts(
			corev1ac.ContainerPort().WithName("http").WithContainerPort(HTTPPort).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName("ops").WithContainerPort(OpsPort).WithProtocol(corev1.ProtocolTCP),
		).
		WithReadinessProbe(probe("/readyz", 5, 3)).
		WithLivenessProbe(probe("/healthz", 10, 6)).
		WithStartupProbe(probe("/healthz", 2, 60)).
		WithVolumeMounts(mounts...).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithRunAsNonRoot(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))
	env := busEnv(t, o)
	if rr := busResources(t, o); rr != nil {
		container = container.WithResources(rr)
		// The bus keeps its Go heap under its memory limit (serve
		// --memory-limit).
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
		WithTerminationGracePeriodSeconds(30).
		WithSecurityContext(podSecurityContext(o.BusPlatformUID)).
		WithContainers(container).
		WithVolumes(volumes...)
	pod := corev1ac.PodTemplateSpec()
	if tpl := podTemplate(t); tpl != nil {
		if md := tpl.Metadata; md != nil {
			pod = pod.WithLabels(maps.Clone(md.Labels)).WithAnnotations(maps.Clone(md.Annotations))
		}
		podSpec = withPodTemplate(podSpec, tpl)
	}
	// The operator's labels go last: no template label replaces one it
	// selects its pods by.
	pod = pod.WithLabels(tenantLabels(t)).WithSpec(podSpec)

	return appsv1ac.StatefulSet(busName(t), t.Namespace).
		WithLabels(tenantLabels(t)).
		WithOwnerReferences(ownerRef(t)).
		WithSpec(spec.WithTemplate(pod))
}

// busResources are the bus container's requests and limits: the Tenant's
// spec.resources, or, when it sets none, the operator's defaults. Nil when
// both are empty.
//
// The lists are deep copies: an apply configuration's ResourceList is the
// map it was given, and Apply decodes the server's answer back into it, so
// handing it the cached Tenant's or the operator's own would write into
// them, from every reconcile at once.
func busResources(t *v1alpha1.Tenant, o Options) *corev1ac.ResourceRequirementsApplyConfiguration {
	res := &t.Spec.Resources
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

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// busEnv is the bus container's environment: the operator's defaults
// (--bus-env) that the Tenant's spec.template.pod.env does not name, then
// the Tenant's own.
func busEnv(t *v1alpha1.Tenant, o Options) []corev1.EnvVar {
	var own []corev1.EnvVar
	if tpl := podTemplate(t); tpl != nil {
		own = tpl.Env
	}
	var out []corev1.EnvVar
	for _, e := range o.BusEnv {
		if !slices.ContainsFunc(own, func(x corev1.EnvVar) bool { return x.Name == e.Name }) {
			out = append(out, e)
		}
	}
	return append(out, own...)
}

// podTemplate returns spec.template.pod, nil when unset.
func podTemplate(t *v1alpha1.Tenant) *v1alpha1.PodTemplate {
	if t.Spec.Template == nil {
		return nil
	}
	return t.Spec.Template.Pod
}

// withPodTemplate sets the scheduling fields of spec.template.pod on the
// bus pods' spec.
func withPodTemplate(spec *corev1ac.PodSpecApplyConfiguration, tpl *v1alpha1.PodTemplate) *corev1ac.PodSpecApplyConfiguration {
	for _, s := range tpl.ImagePullSecrets {
		spec = spec.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}
	if len(tpl.NodeSelector) > 0 {
		spec = spec.WithNodeSelector(maps.Clone(tpl.NodeSelector))
	}
	for i := range tpl.Tolerations {
		spec = spec.WithTolerations(toApplyConfiguration[corev1ac.TolerationApplyConfiguration](&tpl.Tolerations[i]))
	}
	if tpl.Affinity != nil {
		spec = spec.WithAffinity(toApplyConfiguration[corev1ac.AffinityApplyConfiguration](tpl.Affinity))
	}
	for i := range tpl.TopologySpreadConstraints {
		spec = spec.WithTopologySpreadConstraints(toApplyConfiguration[corev1ac.TopologySpreadConstraintApplyConfiguration](&tpl.TopologySpreadConstraints[i]))
	}
	if tpl.PriorityClassName != "" {
		spec = spec.WithPriorityClassName(tpl.PriorityClassName)
	}
	return spec
}

// toApplyConfiguration converts an API object into its apply
// configuration: the two share their JSON form, field for field.
func toApplyConfiguration[T any](obj any) *T {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", obj, err)) // API types always marshal
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(fmt.Sprintf("%T into %T: %v", obj, out, err)) // same JSON form
	}
	return out
}

// podSecurityContext is the bus pods' restricted security context: the
// image's user 65532, or, with platformUID, the user, group and fsGroup
// the platform assigns.
func podSecurityContext(platformUID bool) *corev1ac.PodSecurityContextApplyConfiguration {
	psc := corev1ac.PodSecurityContext().
		WithRunAsNonRoot(true).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
	if !platformUID {
		psc = psc.WithRunAsUser(busUID).WithRunAsGroup(busUID).WithFSGroup(busUID)
	}
	return psc
}
