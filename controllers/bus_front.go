package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1ac "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// busFront is what the objects in front of bus pods are made from (their
// Services, PodDisruptionBudget, HTTPRoute and Ingress), whether the pods
// are a dedicated Tenant's or a pool's.
type busFront struct {
	// name names the publish Service, the PodDisruptionBudget, the route
	// and the Ingress; opsName the headless operations Service.
	name, opsName, namespace string
	labels, selector         map[string]string
	owner                    *metav1ac.OwnerReferenceApplyConfiguration
	// pathPrefix is what the route and the Ingress send to the pods.
	pathPrefix string
	// backend is the publish Service the route and the Ingress send to,
	// when it is not the front's own (name): a pooled Tenant's route sends
	// to its pool's Service, in backendNamespace when that is another.
	backend, backendNamespace string
}

// backendName is the publish Service the route and the Ingress send to.
func (f busFront) backendName() string {
	if f.backend != "" {
		return f.backend
	}
	return f.name
}

// controllerRef is the controlling owner reference to an object of
// api/v1alpha1 of the kind given.
func controllerRef(kind, name string, uid types.UID) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(v1alpha1.GroupVersion.String()).WithKind(kind).
		WithName(name).WithUID(uid).
		WithController(true).WithBlockOwnerDeletion(true)
}

// httpService serves the publish API.
func (f busFront) httpService() *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(f.name, f.namespace).
		WithLabels(f.labels).
		WithOwnerReferences(f.owner).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(f.selector).
			WithPorts(corev1ac.ServicePort().WithName("http").WithProtocol(corev1.ProtocolTCP).
				WithPort(HTTPPort).WithTargetPort(intstr.FromString("http"))))
}

// opsService is headless: it governs the StatefulSet (stable pod DNS
// names) and lets a scraper reach every pod's /metrics.
func (f busFront) opsService() *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(f.opsName, f.namespace).
		WithLabels(f.labels).
		WithOwnerReferences(f.owner).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithSelector(f.selector).
			WithPorts(corev1ac.ServicePort().WithName("ops").WithProtocol(corev1.ProtocolTCP).
				WithPort(OpsPort).WithTargetPort(intstr.FromString("ops"))))
}

// pdb lets one pod at a time be evicted.
func (f busFront) pdb() *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(f.name, f.namespace).
		WithLabels(f.labels).
		WithOwnerReferences(f.owner).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(f.selector)))
}

// httpRoute attaches to the parents and sends pathPrefix on the host
// names to the publish Service.
func (f busFront) httpRoute(parents []v1alpha1.GatewayParentRef, hostnames []string) *gatewayv1ac.HTTPRouteApplyConfiguration {
	var refs []*gatewayv1ac.ParentReferenceApplyConfiguration
	for _, p := range parents {
		ref := gatewayv1ac.ParentReference().WithName(gatewayv1.ObjectName(p.Name))
		if p.Namespace != "" {
			ref = ref.WithNamespace(gatewayv1.Namespace(p.Namespace))
		}
		if p.SectionName != "" {
			ref = ref.WithSectionName(gatewayv1.SectionName(p.SectionName))
		}
		refs = append(refs, ref)
	}
	spec := gatewayv1ac.HTTPRouteSpec().
		WithParentRefs(refs...).
		WithRules(gatewayv1ac.HTTPRouteRule().
			WithMatches(gatewayv1ac.HTTPRouteMatch().WithPath(gatewayv1ac.HTTPPathMatch().
				WithType(gatewayv1.PathMatchPathPrefix).WithValue(f.pathPrefix))).
			WithBackendRefs(f.httpBackendRef()))
	for _, h := range hostnames {
		spec = spec.WithHostnames(gatewayv1.Hostname(h))
	}
	return gatewayv1ac.HTTPRoute(f.name, f.namespace).
		WithLabels(f.labels).
		WithOwnerReferences(f.owner).
		WithSpec(spec)
}

// httpBackendRef is the route's reference to the publish Service.
func (f busFront) httpBackendRef() *gatewayv1ac.HTTPBackendRefApplyConfiguration {
	ref := gatewayv1ac.HTTPBackendRef().WithName(gatewayv1.ObjectName(f.backendName())).WithPort(HTTPPort)
	if f.backendNamespace != "" {
		ref = ref.WithNamespace(gatewayv1.Namespace(f.backendNamespace))
	}
	return ref
}

// ingress sends pathPrefix on in's host to the publish Service, with TLS
// from tlsSecret when it is set.
func (f busFront) ingress(in *v1alpha1.IngressExpose, tlsSecret string) *networkingv1ac.IngressApplyConfiguration {
	spec := networkingv1ac.IngressSpec().
		WithRules(networkingv1ac.IngressRule().
			WithHost(in.Host).
			WithHTTP(networkingv1ac.HTTPIngressRuleValue().
				WithPaths(networkingv1ac.HTTPIngressPath().
					WithPath(f.pathPrefix).
					WithPathType(networkingv1.PathTypePrefix).
					WithBackend(networkingv1ac.IngressBackend().
						WithService(networkingv1ac.IngressServiceBackend().
							WithName(f.backendName()).
							WithPort(networkingv1ac.ServiceBackendPort().WithNumber(HTTPPort)))))))
	if in.ClassName != "" {
		spec = spec.WithIngressClassName(in.ClassName)
	}
	if tlsSecret != "" {
		spec = spec.WithTLS(networkingv1ac.IngressTLS().WithHosts(in.Host).WithSecretName(tlsSecret))
	}
	return networkingv1ac.Ingress(f.name, f.namespace).
		WithLabels(f.labels).
		WithOwnerReferences(f.owner).
		WithSpec(spec)
}

// deleteIfControlled deletes the object of obj's kind named name in
// owner's namespace when owner controls it; one it does not control, or
// none, is left alone.
func deleteIfControlled(ctx context.Context, c client.Client, owner metav1.Object, name string, obj client.Object) error {
	err := c.Get(ctx, types.NamespacedName{Namespace: owner.GetNamespace(), Name: name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get %T %s: %w", obj, name, err)
	case !controlledBy(obj, owner):
		return nil
	}
	if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %T %s: %w", obj, name, err)
	}
	return nil
}
