package controllers

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// answerInto does to obj what controller-runtime's Apply does with the
// server's answer: it decodes it back into the apply configuration. The
// answer is obj's own JSON with one more member in every object, so a map
// of obj that is also someone else's gains a key there.
func answerInto(t *testing.T, obj any) {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		t.Fatal(err)
	}
	var grow func(v any)
	grow = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, c := range v {
				grow(c)
			}
			v["answer.example/added"] = "1" // a label, an annotation and a quantity alike
		case []any:
			for _, c := range v {
				grow(c)
			}
		}
	}
	grow(tree)
	if b, err = json.Marshal(tree); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, obj); err != nil {
		t.Fatal(err)
	}
}

// TestApplyConfigurationsOwnTheirMaps proves that an apply configuration
// shares no map with the Tenant it was built from or with the operator's
// options: Apply writes the server's answer into it, and a shared map is
// then written by every reconcile at once (a "concurrent map writes"
// crash) and into the informer cache's objects and the operator's defaults.
func TestApplyConfigurationsOwnTheirMaps(t *testing.T) {
	quantities := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	withEverything := &v1alpha1.Tenant{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "ns", UID: "u"},
		Spec: v1alpha1.TenantSpec{
			Resources: corev1.ResourceRequirements{Limits: quantities("1", "1Gi"), Requests: quantities("200m", "512Mi")},
			Template: &v1alpha1.TenantTemplate{Pod: &v1alpha1.PodTemplate{
				Metadata:     &v1alpha1.PodTemplateMetadata{Labels: map[string]string{"team": "desk"}, Annotations: map[string]string{"note": "x"}},
				NodeSelector: map[string]string{"pool": "bus"},
				Tolerations:  []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
				Env:          []corev1.EnvVar{{Name: "OTEL_SERVICE_NAME", Value: "bus"}},
			}},
			NetworkPolicy: &v1alpha1.TenantNetworkPolicy{},
			Expose:        &v1alpha1.TenantExpose{Ingress: &v1alpha1.IngressExpose{Host: "bus.example.com", ClassName: "nginx"}},
		},
	}
	withDefaults := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", UID: "v"}}
	o := Options{
		BusImage:       "registry.example/storybus:test",
		BusResources:   corev1.ResourceRequirements{Limits: quantities("2", "2Gi"), Requests: quantities("100m", "256Mi")},
		BusEnv:         []corev1.EnvVar{{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://collector:4317"}},
		TrustedProxies: []string{"10.0.0.0/8"},
		NetworkPolicy: NetworkPolicyOptions{Enabled: true,
			PublishNamespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"gateway": "yes"}},
			DNSPods:           map[string]string{"k8s-app": "kube-dns"}},
		Monitoring: MonitoringOptions{PodMonitor: true, Labels: map[string]string{"release": "prometheus"}},
	}
	optionsBefore := o
	optionsBefore.BusResources = *o.BusResources.DeepCopy()
	optionsBefore.NetworkPolicy.PublishNamespaces = o.NetworkPolicy.PublishNamespaces.DeepCopy()
	optionsBefore.NetworkPolicy.DNSPods = maps.Clone(o.NetworkPolicy.DNSPods)
	optionsBefore.Monitoring.Labels = maps.Clone(o.Monitoring.Labels)
	optionsBefore.BusEnv = slices.Clone(o.BusEnv)
	optionsBefore.TrustedProxies = slices.Clone(o.TrustedProxies)

	for _, tenant := range []*v1alpha1.Tenant{withEverything, withDefaults} {
		before := tenant.DeepCopy()
		answerInto(t, desiredStatefulSet(tenant, o))
		answerInto(t, desiredNetworkPolicy(tenant, o.NetworkPolicy))
		answerInto(t, desiredPDB(tenant))
		answerInto(t, desiredHTTPService(tenant))
		answerInto(t, desiredOpsService(tenant))
		answerInto(t, desiredConfigMap(tenant, []byte("workspace: x\n"), "hash"))
		answerInto(t, desiredPodMonitor(tenant, o.Monitoring))
		if tenant.Spec.Expose != nil {
			answerInto(t, desiredIngress(tenant))
		}
		if !equality.Semantic.DeepEqual(tenant, before) {
			t.Errorf("Tenant %s changed by an answer to its apply configurations:\n got %+v\nwant %+v", tenant.Name, tenant.Spec, before.Spec)
		}
	}
	if !equality.Semantic.DeepEqual(o.BusResources, optionsBefore.BusResources) {
		t.Errorf("the operator's default resources changed by an answer: got %v, want %v", o.BusResources, optionsBefore.BusResources)
	}
	if !equality.Semantic.DeepEqual(o.Monitoring, optionsBefore.Monitoring) || !equality.Semantic.DeepEqual(o.BusEnv, optionsBefore.BusEnv) ||
		!slices.Equal(o.TrustedProxies, optionsBefore.TrustedProxies) {
		t.Errorf("the operator's monitoring, environment or proxy defaults changed by an answer")
	}
	if !equality.Semantic.DeepEqual(o.NetworkPolicy, optionsBefore.NetworkPolicy) {
		t.Errorf("the operator's NetworkPolicy defaults changed by an answer: got %+v, want %+v", o.NetworkPolicy, optionsBefore.NetworkPolicy)
	}
}
