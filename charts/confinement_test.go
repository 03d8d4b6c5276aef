package charts

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/internal/testutil"
)

// confinementRefusal is what the API server says when the chart's
// ValidatingAdmissionPolicy refuses a write.
const confinementRefusal = "denied request"

// installKindsTheOperatorWrites installs the third-party CRDs whose kinds a
// Tenant's reconcile writes (cert-manager's Certificate, Gateway API's
// HTTPRoute, the Prometheus Operator's PodMonitor), at the versions the
// project pins.
func installKindsTheOperatorWrites(t *testing.T, cfg *rest.Config) {
	t.Helper()
	gateway, err := testutil.GatewayAPICRDs()
	if err != nil {
		t.Fatal(err)
	}
	paths := append(gateway,
		filepath.Join(testutil.PinnedModuleDir(t, "..", "cert-manager", "github.com/cert-manager/cert-manager"), "deploy", "crds"),
		filepath.Join(testutil.PinnedModuleDir(t, "..", "prometheus-operator", "github.com/prometheus-operator/prometheus-operator"),
			"example", "prometheus-operator-crd", "monitoring.coreos.com_podmonitors.yaml"))
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("install the CRDs of cert-manager, Gateway API and the Prometheus Operator: %v", err)
	}
}

// asServiceAccount is a client with the rights of ServiceAccount sa of
// namespace ns: the admin's identity, impersonating it, as the API server
// authenticates a pod's token.
func asServiceAccount(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, ns, sa string) client.Client {
	t.Helper()
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	c, err := client.New(as, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkOperatorConfined tries, with the rights of the operator's
// ServiceAccount (the chart's ClusterRole, which allows each of these
// kinds everywhere), what a stolen token would be used for. The chart's
// ValidatingAdmissionPolicy must refuse each one, and must still let the
// operator mark a credentials Secret a user made.
func checkOperatorConfined(t *testing.T, ctx context.Context, admin client.Client, cfg *rest.Config, ns, sa string) {
	t.Helper()
	op := asServiceAccount(t, cfg, admin.Scheme(), ns, sa)

	// Another team's objects, made by an administrator.
	team := "bystander"
	create(t, ctx, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}})
	foreignSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "database"},
		Data: map[string][]byte{"password": []byte("hunter2")}}
	foreignConfigMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "coredns"},
		Data: map[string]string{"Corefile": ".:53 { forward . 10.0.0.10 }"}}
	foreignPolicy := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "deny-all"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	foreignRoute := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"namespace": team, "name": "shop"},
		"spec":     map[string]any{"hostnames": []any{"shop.example.com"}},
	}}
	for _, obj := range []client.Object{foreignSecret, foreignConfigMap, foreignPolicy, foreignRoute} {
		create(t, ctx, admin, obj)
	}

	// A Tenant of the operator's, so that the objects below can be
	// labelled and controlled as the operator's own are.
	tenant := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "decoy"},
		Spec: v1alpha1.TenantSpec{Replicas: new(int32(0))}}
	create(t, ctx, admin, tenant)
	owned := metav1.ObjectMeta{
		Labels: map[string]string{"app.kubernetes.io/managed-by": "storybus-operator"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Tenant",
			Name: tenant.Name, UID: tenant.UID, Controller: new(true)}},
	}
	meta := func(ns, name string) metav1.ObjectMeta {
		m := *owned.DeepCopy()
		m.Namespace, m.Name = ns, name
		return m
	}

	refused := func(what string, err error) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: admitted, want refused by the operator's admission policy", what)
		case !strings.Contains(err.Error(), confinementRefusal):
			t.Errorf("%s: %v, want refused by the operator's admission policy (%q)", what, err, confinementRefusal)
		}
	}

	// Pods of any kind by another name: a privileged StatefulSet in
	// kube-system, labelled and owned as the operator's own.
	privileged := busLikeStatefulSet(meta("kube-system", "node-shell"))
	privileged.Spec.Template.Spec.HostPID = true
	privileged.Spec.Template.Spec.Containers[0].SecurityContext.Privileged = new(true)
	privileged.Spec.Template.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = new(true)
	privileged.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	refused("a privileged StatefulSet in kube-system", op.Create(ctx, privileged))
	for name, mutate := range map[string]func(*corev1.PodSpec){
		"another image": func(p *corev1.PodSpec) { p.Containers[0].Image = "docker.io/library/busybox:1" },
		"kube-system's token": func(p *corev1.PodSpec) {
			p.ServiceAccountName = "kube-proxy"
			p.AutomountServiceAccountToken = new(true)
		},
		"an added capability": func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		},
		"a host network": func(p *corev1.PodSpec) { p.HostNetwork = true },
		"an init container": func(p *corev1.PodSpec) {
			p.InitContainers = []corev1.Container{{Name: "init", Image: p.Containers[0].Image}}
		},
		"a projected token":    func(p *corev1.PodSpec) { p.Volumes = projectedToken() },
		"privilege escalation": func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.AllowPrivilegeEscalation = new(true) },
		"root":                 func(p *corev1.PodSpec) { p.SecurityContext.RunAsNonRoot = new(false) },
		"root's group":         func(p *corev1.PodSpec) { p.SecurityContext.RunAsGroup = new(int64(0)) },
		"seccomp unconfined": func(p *corev1.PodSpec) {
			p.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		},
		"an SELinux type": func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		},
		"a system priority": func(p *corev1.PodSpec) { p.PriorityClassName = "system-node-critical" },
		"a node name":       func(p *corev1.PodSpec) { p.NodeName = "control-plane-0" },
		"another command":   func(p *corev1.PodSpec) { p.Containers[0].Args = []string{"operator"} },
		"envFrom a Secret": func(p *corev1.PodSpec) {
			p.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "database"}}}}
		},
		"another bus's claim": func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-other-bus-0"}}}}
		},
		"no labels of the operators": nil,
	} {
		sts := busLikeStatefulSet(meta(team, "bus-like-"+strings.ToLower(strings.NewReplacer(" ", "-", "'", "").Replace(name))))
		if mutate == nil {
			sts.Labels, sts.OwnerReferences = nil, nil
		} else {
			mutate(&sts.Spec.Template.Spec)
		}
		refused("a StatefulSet with "+name, op.Create(ctx, sts))
	}
	// A claim template bound to a volume made beforehand (a hostPath
	// PersistentVolume, by another route), or cloned from another claim.
	bound := busLikeStatefulSet(meta(team, "bus-like-bound-claim"))
	bound.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "host-root", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}
	refused("a StatefulSet whose claim template names a volume", op.Create(ctx, bound))
	// The pod template the operator writes is admitted: the refusals above
	// are the policy's, not a template it refuses whole.
	if err := op.Create(ctx, busLikeStatefulSet(meta(team, "bus-like"))); err != nil {
		t.Errorf("the operator's own pod template: %v", err)
	}

	// A BusPool's objects: its replicas' StatefulSet (the pod's name in
	// the environment), its PodDisruptionBudget and route, confined to the
	// pool's own pods and Service as a Tenant's are to its bus.
	busPool := &v1alpha1.BusPool{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "decoy"},
		Spec: v1alpha1.BusPoolSpec{NATS: v1alpha1.ExternalStorage{URL: "nats://127.0.0.1:1"}}}
	create(t, ctx, admin, busPool)
	poolOwned := func(name string) metav1.ObjectMeta {
		m := meta(team, name)
		m.OwnerReferences[0].Kind, m.OwnerReferences[0].Name, m.OwnerReferences[0].UID = "BusPool", busPool.Name, busPool.UID
		return m
	}
	replicas := busLikeStatefulSet(poolOwned("decoy-pool-like"))
	replicas.Spec.Template.Spec.Containers[0].Args = []string{"serve", "--pool", team + "_decoy", "--pool-replica", "$(POD_NAME)"}
	replicas.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	if err := op.Create(ctx, replicas); err != nil {
		t.Errorf("a pool's StatefulSet: %v", err)
	}
	poolPDB := func(component string) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: poolOwned("decoy-pool-" + component), Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: new(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{
				"app.kubernetes.io/name": "storybus", "app.kubernetes.io/component": component, "app.kubernetes.io/instance": busPool.Name}}}}
	}
	if err := op.Create(ctx, poolPDB("pool")); err != nil {
		t.Errorf("a pool's PodDisruptionBudget: %v", err)
	}
	refused("a BusPool's PodDisruptionBudget of a Tenant's bus pods", op.Create(ctx, poolPDB("bus")))
	poolPolicy := func(component string) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: poolOwned("decoy-pool-np-" + component), Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				"app.kubernetes.io/name": "storybus", "app.kubernetes.io/component": component, "app.kubernetes.io/instance": busPool.Name}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}}
	}
	if err := op.Create(ctx, poolPolicy("pool")); err != nil {
		t.Errorf("a pool's NetworkPolicy: %v", err)
	}
	refused("a BusPool's NetworkPolicy of a Tenant's bus pods", op.Create(ctx, poolPolicy("bus")))
	poolRoute := func(name, backend string) *unstructured.Unstructured {
		m := poolOwned(name)
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
			"metadata": map[string]any{"namespace": team, "name": name, "labels": map[string]any{"app.kubernetes.io/managed-by": "storybus-operator"},
				"ownerReferences": []any{map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "BusPool", "name": m.OwnerReferences[0].Name, "uid": string(m.OwnerReferences[0].UID), "controller": true}}},
			"spec": map[string]any{"rules": []any{map[string]any{
				"matches":     []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/v1/tenants/"}}},
				"backendRefs": []any{map[string]any{"name": backend, "port": int64(8080)}},
			}}},
		}}
	}
	if err := op.Create(ctx, poolRoute("decoy-pool", "decoy-pool")); err != nil {
		t.Errorf("a pool's HTTPRoute to its Service: %v", err)
	}
	refused("a BusPool's HTTPRoute to a Tenant's bus Service", op.Create(ctx, poolRoute("decoy-pool-other", "decoy-bus")))

	// A pooled Tenant's own route sends its path to its pool's Service,
	// in the pool's namespace; nothing else of another namespace.
	tenantRoute := func(name, backend, backendNS string, port ...int64) *unstructured.Unstructured {
		ref := map[string]any{"name": backend, "port": int64(8080)}
		if len(port) > 0 {
			ref["port"] = port[0]
		}
		if backendNS != "" {
			ref["namespace"] = backendNS
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
			"metadata": map[string]any{"namespace": team, "name": name, "labels": map[string]any{"app.kubernetes.io/managed-by": "storybus-operator"},
				"ownerReferences": []any{map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Tenant", "name": tenant.Name, "uid": string(tenant.UID), "controller": true}}},
			"spec": map[string]any{"rules": []any{map[string]any{
				"matches":     []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/v1/tenants/decoy/"}}},
				"backendRefs": []any{ref},
			}}},
		}}
	}
	if err := op.Create(ctx, tenantRoute("decoy-bus", "shared-pool", "pools")); err != nil {
		t.Errorf("a pooled Tenant's HTTPRoute to its pool's Service: %v", err)
	}
	refused("a Tenant's HTTPRoute to another namespace's Service", op.Create(ctx, tenantRoute("decoy-bus-2", "database", "payments")))
	refused("a Tenant's HTTPRoute to a *-pool Service on another port", op.Create(ctx, tenantRoute("decoy-bus-3", "redis-pool", "", 6379)))
	// The pool's ReferenceGrant lets HTTPRoutes reach its Service alone.
	grant := func(name, service, fromKind, fromNamespace string) *unstructured.Unstructured {
		m := poolOwned(name)
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
			"metadata": map[string]any{"namespace": team, "name": name, "labels": map[string]any{"app.kubernetes.io/managed-by": "storybus-operator", "bus.storybus.io/tenant-namespace": "newsroom"},
				"ownerReferences": []any{map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "BusPool", "name": m.OwnerReferences[0].Name, "uid": string(m.OwnerReferences[0].UID), "controller": true}}},
			"spec": map[string]any{
				"from": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": fromKind, "namespace": fromNamespace}},
				"to":   []any{map[string]any{"group": "", "kind": "Service", "name": service}},
			},
		}}
	}
	if err := op.Create(ctx, grant("decoy-pool-ws-decoy", "decoy-pool", "HTTPRoute", "newsroom")); err != nil {
		t.Errorf("a pool's ReferenceGrant to its Service: %v", err)
	}
	refused("a pool's ReferenceGrant to another Service", op.Create(ctx, grant("decoy-pool-ws-db", "database", "HTTPRoute", "newsroom")))
	refused("a pool's ReferenceGrant to Gateways' TLS", op.Create(ctx, grant("decoy-pool-ws-tls", "decoy-pool", "Gateway", "newsroom")))
	refused("a pool's ReferenceGrant for another namespace than its Tenant's", op.Create(ctx, grant("decoy-pool-ws-other", "decoy-pool", "HTTPRoute", "payments")))

	// Another team's Secret, ConfigMap, NetworkPolicy and HTTPRoute.
	sec := foreignSecret.DeepCopy()
	sec.Data["password"] = []byte("stolen")
	refused("an update of a Secret the operator did not make", op.Update(ctx, sec))
	sec = foreignSecret.DeepCopy()
	sec.Labels = map[string]string{"app.kubernetes.io/managed-by": "storybus-operator"}
	refused("labelling a Secret the operator did not make", op.Update(ctx, sec))
	refused("a patch of a ConfigMap the operator did not make", op.Patch(ctx, foreignConfigMap.DeepCopy(),
		client.RawPatch(types.MergePatchType, []byte(`{"data":{"Corefile":".:53 { forward . 203.0.113.7 }"}}`))))
	refused("a delete of a NetworkPolicy the operator did not make", op.Delete(ctx, foreignPolicy.DeepCopy()))
	refused("a delete of an HTTPRoute the operator did not make", op.Delete(ctx, foreignRoute.DeepCopy()))

	// Objects that would pass for the operator's without being its own.
	fake := meta(team, "fake-owner")
	fake.OwnerReferences[0].Kind = "Nothing"
	refused("a ConfigMap owned by a kind the operator makes nothing for", op.Create(ctx, &corev1.ConfigMap{ObjectMeta: fake}))
	refused("a ConfigMap in kube-system", op.Create(ctx, &corev1.ConfigMap{ObjectMeta: meta("kube-system", "coredns-custom")}))
	saToken := meta(team, "admin-token")
	saToken.Annotations = map[string]string{"kubernetes.io/service-account.name": "default"}
	refused("a ServiceAccount token Secret", op.Create(ctx, &corev1.Secret{ObjectMeta: saToken, Type: corev1.SecretTypeServiceAccountToken}))
	pdb := meta(team, "decoy-bus")
	refused("a PodDisruptionBudget of other pods", op.Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: pdb, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: new(intstr.FromString("100%")), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}}}))
	takeover := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"namespace": team, "name": "decoy-bus", "labels": map[string]any{"app.kubernetes.io/managed-by": "storybus-operator"},
			"ownerReferences": []any{map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Tenant", "name": tenant.Name, "uid": string(tenant.UID), "controller": true}}},
		"spec": map[string]any{"hostnames": []any{"shop.example.com"}, "rules": []any{map[string]any{
			"matches": []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/login"}}},
			"filters": []any{map[string]any{"type": "RequestRedirect", "requestRedirect": map[string]any{"hostname": "shop.evil.example"}}},
		}}},
	}}
	refused("an HTTPRoute taking over another team's path", op.Create(ctx, takeover))
	ca := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"namespace": team, "name": "decoy-tls", "labels": map[string]any{"app.kubernetes.io/managed-by": "storybus-operator"},
			"ownerReferences": []any{map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Tenant", "name": tenant.Name, "uid": string(tenant.UID), "controller": true}}},
		"spec": map[string]any{"isCA": true, "secretName": "database", "commonName": "sub-ca", "issuerRef": map[string]any{"name": "cluster-ca", "kind": "ClusterIssuer"}},
	}}
	refused("a CA Certificate kept in another team's Secret", op.Create(ctx, ca))
	refused("a change of a Tenant's spec", op.Patch(ctx, tenant.DeepCopy(),
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"deletionPolicy":"delete","image":"ghcr.io/storybus/storybus:0.0.1"}}`))))

	// New objects that would intercept or open another team's traffic.
	refused("a Service with externalIPs", op.Create(ctx, &corev1.Service{ObjectMeta: meta(team, "intercept"),
		Spec: corev1.ServiceSpec{ExternalIPs: []string{"203.0.113.7"}, Ports: []corev1.ServicePort{{Port: 443}}}}))
	refused("a NetworkPolicy that selects every pod", op.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: meta(team, "allow-all"),
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}}))
	refused("a NetworkPolicy that selects another Tenant's bus pods", op.Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: meta(team, "allow-other"),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "storybus", "app.kubernetes.io/component": "bus", "app.kubernetes.io/instance": "other"}},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{}}}}))
	refused("an unlabelled ConfigMap", op.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "unlabelled"}}))

	// What a reconcile does to a credentials Secret a user made: its own
	// bus.storybus.io/ annotations, nothing else.
	marked := foreignSecret.DeepCopy()
	if err := admin.Get(ctx, client.ObjectKeyFromObject(marked), marked); err != nil {
		t.Fatal(err)
	}
	marked.Annotations = map[string]string{v1alpha1.AnnotationSecretHash: "seen"}
	if err := op.Update(ctx, marked); err != nil {
		t.Errorf("the operator's annotation on a Secret a user made: %v", err)
	}
	marked.Annotations["kubernetes.io/service-account.name"] = "default"
	refused("another annotation on a Secret a user made", op.Update(ctx, marked))
	delete(marked.Annotations, "kubernetes.io/service-account.name")
	marked.Immutable = new(true)
	refused("making a Secret a user made immutable", op.Update(ctx, marked))

	// Nothing refused above changed.
	var kept corev1.Secret
	if err := admin.Get(ctx, client.ObjectKeyFromObject(foreignSecret), &kept); err != nil || string(kept.Data["password"]) != "hunter2" {
		t.Errorf("the foreign Secret after the refusals: %v %q", err, kept.Data["password"])
	}
	for _, obj := range []client.Object{foreignPolicy.DeepCopy(), foreignRoute.DeepCopy()} {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Errorf("%s %s after the refused delete: %v", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "node-shell"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("the privileged StatefulSet: %v, want not found", err)
	}
}

// busLikeStatefulSet is a StatefulSet with the pod template the operator
// writes for a Tenant: the chart's bus image, restricted, no token.
func busLikeStatefulSet(meta metav1.ObjectMeta) *appsv1.StatefulSet {
	labels := map[string]string{"app.kubernetes.io/name": "storybus", "app.kubernetes.io/component": "bus", "app.kubernetes.io/instance": meta.Name}
	return &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{
		Replicas: new(int32(0)),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: new(false),
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: new(true), RunAsUser: new(int64(65532)),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Containers: []corev1.Container{{
					Name: "bus", Image: "ghcr.io/storybus/storybus:test", Command: []string{"storybus"}, Args: []string{"serve"},
					SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: new(false), ReadOnlyRootFilesystem: new(true), RunAsNonRoot: new(true),
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					},
				}},
				Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			},
		},
	}}
}

// projectedToken is a volume that mints a ServiceAccount token.
func projectedToken() []corev1.Volume {
	return []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
}

// fullTenant is a Tenant using every kind of object the operator writes:
// TLS from a cert-manager issuer, a Gateway API route, a NetworkPolicy, a
// PodMonitor, and a Connection whose credentials Secret a user made; and a
// BusPool beside it, exposed.
func fullTenant(t *testing.T, ctx context.Context, k8s client.Client, ns string) {
	t.Helper()
	create(t, ctx, k8s, &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns}, Spec: v1alpha1.TenantSpec{
		TLS:           &v1alpha1.TenantTLS{IssuerRef: &v1alpha1.IssuerReference{Name: "ca"}},
		Expose:        &v1alpha1.TenantExpose{Gateway: &v1alpha1.GatewayExpose{ParentRefs: []v1alpha1.GatewayParentRef{{Name: "platform"}}, Hostnames: []string{"bus.example.com"}}},
		NetworkPolicy: &v1alpha1.TenantNetworkPolicy{Enabled: new(true)},
		Monitoring:    &v1alpha1.TenantMonitoring{PodMonitor: &v1alpha1.TenantPodMonitor{Enabled: new(true)}},
	}})
	create(t, ctx, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cms-credentials"},
		Data: map[string][]byte{v1alpha1.CredentialsClientIDKey: []byte("cms"), v1alpha1.CredentialsClientSecretKey: []byte(strings.Repeat("s", 40))}})
	create(t, ctx, k8s, &v1alpha1.Connection{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cms"},
		Spec: v1alpha1.ConnectionSpec{TenantRef: v1alpha1.LocalObjectReference{Name: ns}}})
	create(t, ctx, k8s, &v1alpha1.Connection{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wire"},
		Spec: v1alpha1.ConnectionSpec{TenantRef: v1alpha1.LocalObjectReference{Name: ns}}})
	// A BusPool, exposed: its cluster need not be reachable for its
	// replicas' objects to be made.
	create(t, ctx, k8s, &v1alpha1.BusPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}, Spec: v1alpha1.BusPoolSpec{
		NATS:   v1alpha1.ExternalStorage{URL: "nats://127.0.0.1:1"},
		Expose: &v1alpha1.TenantExpose{Gateway: &v1alpha1.GatewayExpose{ParentRefs: []v1alpha1.GatewayParentRef{{Name: "platform"}}, Hostnames: []string{"pool.example.com"}}},
	}})
}

// checkFullTenant waits for what the operator makes of fullTenant, with
// the chart's RBAC and admission policy.
func checkFullTenant(t *testing.T, ctx context.Context, k8s client.Client, ns string) {
	t.Helper()
	objects := []struct{ kind, name string }{
		{"cert-manager.io/v1/Certificate", ns + "-tls"},
		{"gateway.networking.k8s.io/v1/HTTPRoute", ns + "-bus"},
		{"networking.k8s.io/v1/NetworkPolicy", ns + "-bus"},
		{"monitoring.coreos.com/v1/PodMonitor", ns + "-bus"},
		{"v1/Secret", "wire-credentials"},
		// The pool's.
		{"apps/v1/StatefulSet", "shared-pool"},
		{"v1/Service", "shared-pool-ops"},
		{"policy/v1/PodDisruptionBudget", "shared-pool"},
		{"gateway.networking.k8s.io/v1/HTTPRoute", "shared-pool"},
	}
	for _, o := range objects {
		kind, name := o.kind, o.name
		gv, k := kind[:strings.LastIndex(kind, "/")], kind[strings.LastIndex(kind, "/")+1:]
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(gv)
		u.SetKind(k)
		eventually(t, fmt.Sprintf("the operator makes the Tenant's %s %s", k, name), func() error {
			return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u)
		})
	}
	// The Secret the user made for cms is read and marked, not taken over.
	eventually(t, "the operator marks the user's credentials Secret", func() error {
		var s corev1.Secret
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "cms-credentials"}, &s); err != nil {
			return err
		}
		if s.Annotations[v1alpha1.AnnotationSecretHash] == "" {
			return errors.New("no " + v1alpha1.AnnotationSecretHash + " annotation")
		}
		if len(s.OwnerReferences) != 0 {
			return fmt.Errorf("owner references %v on a Secret a user made", s.OwnerReferences)
		}
		return nil
	})
	eventually(t, "the Tenant's and Connections' conditions", func() error {
		var tn v1alpha1.Tenant
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: ns}, &tn); err != nil {
			return err
		}
		for _, c := range []string{v1alpha1.ConditionMonitored, v1alpha1.ConditionConfigurationValid} {
			if cond := findCondition(tn.Status.Conditions, c); cond == nil || cond.Status != metav1.ConditionTrue {
				return fmt.Errorf("Tenant %s: %+v", c, cond)
			}
		}
		for _, name := range []string{"cms", "wire"} {
			var c v1alpha1.Connection
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &c); err != nil {
				return err
			}
			if cond := findCondition(c.Status.Conditions, v1alpha1.ConditionCredentialsReady); cond == nil || cond.Status != metav1.ConditionTrue {
				return fmt.Errorf("Connection %s CredentialsReady: %+v", name, cond)
			}
		}
		return nil
	})
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
