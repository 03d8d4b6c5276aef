package controllers

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

func TestBusArgs(t *testing.T) {
	tests := []struct {
		name    string
		storage *v1alpha1.TenantStorage
		want    []string
		notWant []string
	}{
		{"default: embedded, fsync always", nil,
			[]string{"serve", "--config /etc/storybus/config/workspace.yaml", "--data-dir /var/lib/storybus", "--sync always"}, []string{"--nats-url"}},
		{"embedded, fsync interval", &v1alpha1.TenantStorage{Embedded: &v1alpha1.EmbeddedStorage{Sync: "interval"}},
			[]string{"--sync interval"}, nil},
		{"external, no credentials", &v1alpha1.TenantStorage{External: &v1alpha1.ExternalStorage{URL: "nats://n:4222"}},
			[]string{"--nats-url nats://n:4222", "--replicas 3"}, []string{"--data-dir", "--nats-credentials", "--sync"}},
		{"external, credentials with a key", &v1alpha1.TenantStorage{External: &v1alpha1.ExternalStorage{URL: "tls://n:4222", Replicas: 5,
			CredentialsSecretRef: &v1alpha1.SecretKeyReference{Name: "s", Key: "bus.creds"}}},
			[]string{"--replicas 5", "--nats-credentials /etc/storybus/nats/bus.creds"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: v1alpha1.TenantSpec{Storage: tc.storage}}
			args := strings.Join(busArgs(tn, nil), " ")
			for _, w := range tc.want {
				if !strings.Contains(args, w) {
					t.Errorf("%q lacks %q", args, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(args, w) {
					t.Errorf("%q has %q", args, w)
				}
			}
		})
	}
}

// TestStatefulSetDoesNotDependOnConfiguration proves the pod template is
// the same whatever the workspace configuration: a configuration change
// can never roll the bus pods.
func TestStatefulSetDoesNotDependOnConfiguration(t *testing.T) {
	tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns", UID: "u"}}
	sts := desiredStatefulSet(tn, Options{BusImage: "img"})
	tpl := sts.Spec.Template
	if len(tpl.Annotations) != 0 {
		t.Errorf("pod template annotations %v", tpl.Annotations)
	}
	c := tpl.Spec.Containers[0]
	if *c.Image != "img" || !slices.Equal(c.Command, []string{"storybus"}) || *c.SecurityContext.ReadOnlyRootFilesystem != true {
		t.Errorf("container %+v", c)
	}
	tn.Spec.Image = "other"
	if got := *desiredStatefulSet(tn, Options{BusImage: "img"}).Spec.Template.Spec.Containers[0].Image; got != "other" {
		t.Errorf("spec.image ignored: %s", got)
	}
}

// The bus pods run as the image's user, unless the platform assigns one.
func TestBusPodUser(t *testing.T) {
	tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns", UID: "u"}}
	psc := desiredStatefulSet(tn, Options{BusImage: "img"}).Spec.Template.Spec.SecurityContext
	if *psc.RunAsUser != 65532 || *psc.RunAsGroup != 65532 || *psc.FSGroup != 65532 || !*psc.RunAsNonRoot {
		t.Errorf("default: %+v", psc)
	}
	psc = desiredStatefulSet(tn, Options{BusImage: "img", BusPlatformUID: true}).Spec.Template.Spec.SecurityContext
	if psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.FSGroup != nil || !*psc.RunAsNonRoot ||
		psc.SeccompProfile == nil || *psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("platform-assigned: %+v", psc)
	}
}

// TestPodTemplate renders spec.template.pod into the bus pods: every
// scheduling field as given, extra labels and annotations beside the
// operator's, and never a label that would change which pods the
// StatefulSet, Services and PodDisruptionBudget select.
func TestPodTemplate(t *testing.T) {
	full := &v1alpha1.PodTemplate{
		Metadata: &v1alpha1.PodTemplateMetadata{
			Labels:      map[string]string{"team": "news", "app.kubernetes.io/instance": "other", LabelManagedBy: "me"},
			Annotations: map[string]string{"prometheus.io/scrape": "true"},
		},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
		NodeSelector:     map[string]string{"disk": "ssd"},
		Tolerations:      []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "bus", Effect: corev1.TaintEffectNoSchedule}},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}}}}},
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": "n"}}}},
		PriorityClassName: "bus-critical",
		Env: []corev1.EnvVar{
			{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://otel-collector.observability:4318"},
			{Name: "OTEL_EXPORTER_OTLP_HEADERS", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "otlp"}, Key: "headers"}}},
		},
	}
	tests := []struct {
		name  string
		tpl   *v1alpha1.TenantTemplate
		check func(t *testing.T, pod corev1.PodTemplateSpec)
	}{
		{"no template: nothing but the operator's", nil, func(t *testing.T, pod corev1.PodTemplateSpec) {
			s := pod.Spec
			if len(pod.Annotations) != 0 || len(s.ImagePullSecrets) != 0 || s.NodeSelector != nil || s.Tolerations != nil ||
				s.Affinity != nil || s.TopologySpreadConstraints != nil || s.PriorityClassName != "" || s.Containers[0].Env != nil {
				t.Errorf("pod %+v", pod)
			}
		}},
		{"empty pod template", &v1alpha1.TenantTemplate{Pod: &v1alpha1.PodTemplate{}}, func(t *testing.T, pod corev1.PodTemplateSpec) {
			if len(pod.Annotations) != 0 || pod.Spec.Affinity != nil || len(pod.Labels) != len(tenantLabels(&v1alpha1.Tenant{})) {
				t.Errorf("pod %+v", pod)
			}
		}},
		{"every field", &v1alpha1.TenantTemplate{Pod: full}, func(t *testing.T, pod corev1.PodTemplateSpec) {
			s := pod.Spec
			if pod.Labels["team"] != "news" || pod.Annotations["prometheus.io/scrape"] != "true" {
				t.Errorf("metadata %+v", pod.ObjectMeta)
			}
			if !reflect.DeepEqual(s.ImagePullSecrets, full.ImagePullSecrets) || !reflect.DeepEqual(s.NodeSelector, full.NodeSelector) ||
				!reflect.DeepEqual(s.Tolerations, full.Tolerations) || !reflect.DeepEqual(s.Affinity, full.Affinity) ||
				!reflect.DeepEqual(s.TopologySpreadConstraints, full.TopologySpreadConstraints) || s.PriorityClassName != "bus-critical" {
				t.Errorf("pod spec %+v", s)
			}
			if !reflect.DeepEqual(s.Containers[0].Env, full.Env) {
				t.Errorf("bus container env %+v", s.Containers[0].Env)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns", UID: "u"}, Spec: v1alpha1.TenantSpec{Template: tc.tpl}}
			pod := renderedPod(t, desiredStatefulSet(tn, Options{BusImage: "img"}))
			for k, v := range tenantLabels(tn) {
				if pod.Labels[k] != v {
					t.Errorf("label %s=%q, want the operator's %q", k, pod.Labels[k], v)
				}
			}
			// The container and its security are the operator's alone.
			if c := pod.Spec.Containers; len(c) != 1 || c[0].Image != "img" || !*pod.Spec.SecurityContext.RunAsNonRoot {
				t.Errorf("containers %+v", c)
			}
			tc.check(t, pod)
		})
	}
}

// TestBusResources: a Tenant's spec.resources, else the operator's
// defaults, else none.
func TestBusResources(t *testing.T) {
	defaults := corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}
	own := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	tests := []struct {
		name     string
		spec     corev1.ResourceRequirements
		defaults corev1.ResourceRequirements
		want     corev1.ResourceRequirements
	}{
		{"neither", corev1.ResourceRequirements{}, corev1.ResourceRequirements{}, corev1.ResourceRequirements{}},
		{"the operator's defaults", corev1.ResourceRequirements{}, defaults, defaults},
		{"the Tenant's own, not mixed with the defaults", own, defaults, own},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns", UID: "u"}, Spec: v1alpha1.TenantSpec{Resources: tc.spec}}
			got := renderedPod(t, desiredStatefulSet(tn, Options{BusImage: "img", BusResources: tc.defaults})).Spec.Containers[0].Resources
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("resources %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestBusMemoryLimitReachesTheBus proves a bus container with a memory
// limit is told it (STORYBUS_MEMORY_LIMIT from its own limits.memory, which
// serve turns into its Go memory limit), and one without a limit is not.
func TestBusMemoryLimitReachesTheBus(t *testing.T) {
	limited := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	for name, tc := range map[string]struct {
		defaults corev1.ResourceRequirements
		want     bool
	}{
		"a memory limit": {limited, true},
		"requests only":  {corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns", UID: "u"}}
			c := renderedPod(t, desiredStatefulSet(tn, Options{BusImage: "img", BusResources: tc.defaults})).Spec.Containers[0]
			i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "STORYBUS_MEMORY_LIMIT" })
			if got := i >= 0; got != tc.want {
				t.Fatalf("STORYBUS_MEMORY_LIMIT set %v, want %v: %+v", got, tc.want, c.Env)
			}
			if i >= 0 {
				ref := c.Env[i].ValueFrom.ResourceFieldRef
				if ref == nil || ref.Resource != "limits.memory" || ref.ContainerName != "bus" {
					t.Fatalf("STORYBUS_MEMORY_LIMIT from %+v, want the bus container's limits.memory", c.Env[i].ValueFrom)
				}
			}
		})
	}
}

// renderedPod is the pod template of an apply configuration, as the API
// server would read it.
func renderedPod(t *testing.T, sts *appsv1ac.StatefulSetApplyConfiguration) corev1.PodTemplateSpec {
	t.Helper()
	b, err := json.Marshal(sts.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.PodTemplateSpec
	if err := json.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// TestPodTemplateApplied: the API server takes spec.template.pod into the
// bus's StatefulSet, with the operator's default requests for a Tenant
// that sets no resources, and a template change reaches it.
func TestPodTemplateApplied(t *testing.T) {
	ns := newNamespace(t)
	tpl := &v1alpha1.PodTemplate{
		Metadata:          &v1alpha1.PodTemplateMetadata{Labels: map[string]string{"team": "news"}, Annotations: map[string]string{"example.com/owner": "desk"}},
		ImagePullSecrets:  []corev1.LocalObjectReference{{Name: "regcred"}},
		NodeSelector:      map[string]string{"disk": "ssd"},
		Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "bus", Effect: corev1.TaintEffectNoSchedule}},
		Affinity:          &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": "placed"}}}}}}},
		PriorityClassName: "bus-critical",
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": "placed"}}}},
	}
	create(t, newTenant(ns, "placed", func(tn *v1alpha1.Tenant) { tn.Spec.Template = &v1alpha1.TenantTemplate{Pod: tpl} }))
	sts := &appsv1.StatefulSet{}
	eventually(t, "StatefulSet with the template", func() error {
		if err := get(ns, "placed-bus", sts); err != nil {
			return err
		}
		pod := sts.Spec.Template
		if pod.Labels["team"] != "news" || pod.Annotations["example.com/owner"] != "desk" || pod.Labels["app.kubernetes.io/instance"] != "placed" {
			return fmt.Errorf("pod metadata %+v", pod.ObjectMeta)
		}
		s := pod.Spec
		if !reflect.DeepEqual(s.ImagePullSecrets, tpl.ImagePullSecrets) || !reflect.DeepEqual(s.NodeSelector, tpl.NodeSelector) ||
			!reflect.DeepEqual(s.Tolerations, tpl.Tolerations) || !equality.Semantic.DeepEqual(s.Affinity, tpl.Affinity) ||
			!equality.Semantic.DeepEqual(s.TopologySpreadConstraints, tpl.TopologySpreadConstraints) || s.PriorityClassName != "bus-critical" {
			return fmt.Errorf("pod spec %+v", s)
		}
		return nil
	})
	if got := sts.Spec.Template.Spec.Containers[0].Resources; !equality.Semantic.DeepEqual(got, testBusResources) {
		t.Errorf("resources %+v, want the operator's defaults %+v", got, testBusResources)
	}

	update(t, ns, "placed", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) {
		tn.Spec.Template.Pod.NodeSelector = nil
		tn.Spec.Template.Pod.Metadata.Labels = map[string]string{"team": "sports"}
	})
	eventually(t, "StatefulSet follows the template", func() error {
		if err := get(ns, "placed-bus", sts); err != nil {
			return err
		}
		if pod := sts.Spec.Template; pod.Labels["team"] != "sports" || pod.Spec.NodeSelector != nil {
			return fmt.Errorf("pod labels %v, node selector %v", pod.Labels, pod.Spec.NodeSelector)
		}
		return nil
	})
}

func TestBusArgsTrustedProxies(t *testing.T) {
	operator := []string{"10.42.0.0/16"}
	for _, tc := range []struct {
		name     string
		tenant   []string
		operator []string
		want     string
	}{
		{"none trusted", nil, nil, ""},
		{"the operator's default", nil, operator, "--trusted-proxies 10.42.0.0/16"},
		{"the Tenant's own wins", []string{"192.0.2.0/24", "2001:db8::/32"}, operator, "--trusted-proxies 192.0.2.0/24,2001:db8::/32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: v1alpha1.TenantSpec{TrustedProxies: tc.tenant}}
			args := strings.Join(busArgs(tn, tc.operator), " ")
			if tc.want == "" {
				if strings.Contains(args, "--trusted-proxies") {
					t.Fatalf("%q trusts proxies", args)
				}
				return
			}
			if !strings.Contains(args, tc.want) {
				t.Fatalf("%q lacks %q", args, tc.want)
			}
		})
	}
}

// TestBusEnv: the operator's OpenTelemetry defaults reach every bus
// container, and a Tenant's own variable of the same name replaces one.
func TestBusEnv(t *testing.T) {
	o := Options{BusImage: "img", BusEnv: []corev1.EnvVar{
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://platform-collector:4318"},
		{Name: "OTEL_TRACES_SAMPLER", Value: "parentbased_traceidratio"},
	}}
	tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns"}}
	if got := renderedPod(t, desiredStatefulSet(tn, o)).Spec.Containers[0].Env; !reflect.DeepEqual(got, o.BusEnv) {
		t.Fatalf("defaults: env %+v", got)
	}
	tn.Spec.Template = &v1alpha1.TenantTemplate{Pod: &v1alpha1.PodTemplate{Env: []corev1.EnvVar{
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://newsroom-collector:4318"}}}}
	want := []corev1.EnvVar{o.BusEnv[1], tn.Spec.Template.Pod.Env[0]}
	if got := renderedPod(t, desiredStatefulSet(tn, o)).Spec.Containers[0].Env; !reflect.DeepEqual(got, want) {
		t.Fatalf("a Tenant's own: env %+v, want %+v", got, want)
	}
}
