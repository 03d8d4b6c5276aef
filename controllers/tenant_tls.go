package controllers

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/storybus/storybus/api/v1alpha1"
)

// A Tenant with spec.tls has its bus serve HTTPS. The key pair comes from a
// Secret the platform provides (spec.tls.secretName), or from a cert-manager
// Certificate the operator writes (spec.tls.issuerRef). The operator writes
// the Certificate as an unstructured object, so it needs none of
// cert-manager's Go packages and runs in clusters without cert-manager: it
// asks the RESTMapper whether the CRD is installed, reports
// CertManagerNotInstalled while it is not, and starts watching Certificates
// the first time it is.
//
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;patch

// TLSDir is where a bus pod mounts its TLS Secret: a volume of its own,
// which kubelet updates in place when the Secret is renewed, so the bus
// reloads the pair without a restart.
const TLSDir = "/etc/storybus/tls"

const tlsVolume = "tls"

// crdRecheck is how often the operator looks again for the CRDs of a kind
// a Tenant asks for and the cluster lacks (cert-manager's Certificate, the
// Prometheus Operator's PodMonitor): no watch can report their
// installation.
const crdRecheck = 10 * time.Second

// certificateGVK is cert-manager's Certificate.
var certificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// tlsSecretName is the Secret holding the bus's key pair; "" without TLS.
func tlsSecretName(t *v1alpha1.Tenant) string {
	switch {
	case t.Spec.TLS == nil:
		return ""
	case t.Spec.TLS.SecretName != "":
		return t.Spec.TLS.SecretName
	default:
		return t.Name + "-tls"
	}
}

// tlsArgs are the bus's TLS flags.
func tlsArgs(t *v1alpha1.Tenant) []string {
	if tlsSecretName(t) == "" {
		return nil
	}
	return []string{"--tls-cert-file", TLSDir + "/" + corev1.TLSCertKey, "--tls-key-file", TLSDir + "/" + corev1.TLSPrivateKeyKey}
}

// tlsMounts are the bus pod's TLS volume and its mount; none without TLS.
func tlsMounts(t *v1alpha1.Tenant) ([]*corev1ac.VolumeApplyConfiguration, []*corev1ac.VolumeMountApplyConfiguration) {
	name := tlsSecretName(t)
	if name == "" {
		return nil, nil
	}
	return []*corev1ac.VolumeApplyConfiguration{corev1ac.Volume().WithName(tlsVolume).
			WithSecret(corev1ac.SecretVolumeSource().WithSecretName(name).WithDefaultMode(0o440).WithItems(
				corev1ac.KeyToPath().WithKey(corev1.TLSCertKey).WithPath(corev1.TLSCertKey),
				corev1ac.KeyToPath().WithKey(corev1.TLSPrivateKeyKey).WithPath(corev1.TLSPrivateKeyKey)))},
		[]*corev1ac.VolumeMountApplyConfiguration{corev1ac.VolumeMount().WithName(tlsVolume).WithMountPath(TLSDir).WithReadOnly(true)}
}

// exposedHostnames are the host names spec.expose serves the bus under:
// the Ingress's host or the route's host names.
func exposedHostnames(t *v1alpha1.Tenant) []string { return exposeHostnames(t.Spec.Expose) }

// exposeHostnames are the host names an expose (a Tenant's or a pool's)
// serves under.
func exposeHostnames(ex *v1alpha1.TenantExpose) []string {
	switch {
	case ex == nil:
		return nil
	case ex.Ingress != nil:
		return []string{ex.Ingress.Host}
	case ex.Gateway != nil:
		return ex.Gateway.Hostnames
	}
	return nil
}

// certificateDNSNames are the names the Certificate covers: the bus
// Service's in-cluster names, then spec.tls.dnsNames and the host names of
// spec.expose. A pooled Tenant has no Service of its own: only the names
// it is given.
func certificateDNSNames(t *v1alpha1.Tenant, clusterDomain string) []string {
	var names []string
	if t.Spec.Pool == nil {
		names = serviceDNSNames(busName(t), t.Namespace, clusterDomain)
	}
	for _, n := range append(slices.Clone(t.Spec.TLS.DNSNames), exposedHostnames(t)...) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// serviceDNSNames are the in-cluster names of Service svc of namespace ns.
func serviceDNSNames(svc, ns, clusterDomain string) []string {
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc." + clusterDomain}
}

// desiredCertificate is the cert-manager Certificate of an issuerRef
// Tenant, controlled by it.
func desiredCertificate(t *v1alpha1.Tenant, clusterDomain string) *unstructured.Unstructured {
	ref := t.Spec.TLS.IssuerRef
	kind, group := ref.Kind, ref.Group
	if kind == "" {
		kind = "Issuer"
	}
	if group == "" {
		group = certificateGVK.Group
	}
	names := make([]any, 0, len(t.Spec.TLS.DNSNames)+4)
	for _, n := range certificateDNSNames(t, clusterDomain) {
		names = append(names, n)
	}
	spec := map[string]any{
		"secretName": tlsSecretName(t),
		"dnsNames":   names,
		"usages":     []any{"server auth"},
		"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
		"secretTemplate": map[string]any{
			"labels": map[string]any{LabelTenant: t.Name},
		},
		"issuerRef": map[string]any{"name": ref.Name, "kind": kind, "group": group},
	}
	if t.Spec.Pool == nil {
		// A pooled Tenant's names are its own host names, which may be
		// longer than a common name may be: its certificate names them
		// in dnsNames only.
		spec["commonName"] = busName(t) + "." + t.Namespace + ".svc"
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(certificateGVK)
	setTenantMetadata(u, t, tlsSecretName(t), tenantLabels(t))
	return u
}

// setTenantMetadata names an unstructured object the operator writes for
// t, in t's namespace, with labels, and makes t its controlling owner.
func setTenantMetadata(u *unstructured.Unstructured, t *v1alpha1.Tenant, name string, labels map[string]string) {
	u.SetName(name)
	u.SetNamespace(t.Namespace)
	u.SetLabels(labels)
	u.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(t, v1alpha1.GroupVersion.WithKind("Tenant"))})
}

// kindWatch starts the watch of a kind whose CRDs may be installed after
// the operator started (cert-manager's Certificates, the Prometheus
// Operator's PodMonitors), the first time they are seen.
type kindWatch struct {
	mu      sync.Mutex
	started bool
}

// watchControlled has the controller reconcile the Tenant controlling an
// object of kind gvk whenever one changes (kindWatch.start).
func (r *TenantWorkloadReconciler) watchControlled(ctx context.Context, w *kindWatch, gvk schema.GroupVersionKind) error {
	return w.start(ctx, r.controller, r.Cache, r.Client, &v1alpha1.Tenant{}, gvk)
}

// start has c reconcile the object of owner's kind controlling an object
// of kind gvk whenever one changes, starting the watch in informers unless it
// started already (or there is no controller: a reconciler called
// directly), and waits until the watch sees every change: an object
// deleted before that would never be written again.
func (w *kindWatch) start(ctx context.Context, c controller.Controller, informers cache.Cache, cl client.Client, owner client.Object, gvk schema.GroupVersionKind) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || c == nil {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	src := source.Kind[client.Object](informers, u,
		handler.EnqueueRequestForOwner(cl.Scheme(), cl.RESTMapper(), owner, handler.OnlyControllerOwner()))
	if err := c.Watch(src); err != nil {
		return err
	}
	w.started = true
	syncCtx, cancel := context.WithTimeout(ctx, watchSyncTimeout)
	defer cancel()
	return src.WaitForSync(syncCtx)
}

// watchSyncTimeout bounds the wait for a new watch's first listing.
const watchSyncTimeout = 30 * time.Second

// reconcileTLS writes the Certificate of an issuerRef Tenant and records
// the CertificateReady condition from the Certificate's status or the
// provided Secret's certificate.
func (r *TenantWorkloadReconciler) reconcileTLS(ctx context.Context, s *workloadScope) (ctrl.Result, error) {
	t := s.tenant
	if t.Spec.TLS == nil {
		meta.RemoveStatusCondition(&t.Status.Conditions, v1alpha1.ConditionCertificateReady)
		return ctrl.Result{}, nil
	}
	var c metav1.Condition
	var res ctrl.Result
	var err error
	if t.Spec.TLS.SecretName != "" {
		c, res, err = r.providedSecretCondition(ctx, s)
	} else {
		c, res, err = r.certificateCondition(ctx, s)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	setCondition(t, c)
	return res, nil
}

// providedSecretCondition judges the certificate of spec.tls.secretName.
func (r *TenantWorkloadReconciler) providedSecretCondition(ctx context.Context, s *workloadScope) (metav1.Condition, ctrl.Result, error) {
	t := s.tenant
	name := t.Spec.TLS.SecretName
	sec := &corev1.Secret{}
	err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		waiting := "the bus pods wait for it"
		if t.Spec.Pool != nil {
			waiting = "the workspace is placed on its pool once it does"
		}
		return cond(v1alpha1.ConditionCertificateReady, metav1.ConditionFalse, v1alpha1.ReasonTLSSecretInvalid,
			"Secret %s of spec.tls.secretName does not exist: %s", name, waiting), ctrl.Result{}, nil
	case err != nil:
		return metav1.Condition{}, ctrl.Result{}, fmt.Errorf("get tls secret %s: %w", name, err)
	}
	if len(sec.Data[corev1.TLSPrivateKeyKey]) == 0 {
		return cond(v1alpha1.ConditionCertificateReady, metav1.ConditionFalse, v1alpha1.ReasonTLSSecretInvalid,
			"Secret %s has no %s", name, corev1.TLSPrivateKeyKey), ctrl.Result{}, nil
	}
	cert, err := leafCertificate(sec.Data[corev1.TLSCertKey])
	if err != nil {
		return cond(v1alpha1.ConditionCertificateReady, metav1.ConditionFalse, v1alpha1.ReasonTLSSecretInvalid,
			"Secret %s: %v", name, err), ctrl.Result{}, nil
	}
	c, res := r.expiryCondition(cert.NotAfter, fmt.Sprintf("the certificate of Secret %s", name))
	return c, res, nil
}

// expiryCondition is True until notAfter, and has the Tenant looked at
// again when it passes.
func (r *TenantWorkloadReconciler) expiryCondition(notAfter time.Time, what string) (metav1.Condition, ctrl.Result) {
	left := notAfter.Sub(r.Now())
	if left <= 0 {
		return cond(v1alpha1.ConditionCertificateReady, metav1.ConditionFalse, v1alpha1.ReasonCertificateExpired,
			"%s expired at %s", what, notAfter.UTC().Format(time.RFC3339)), ctrl.Result{}
	}
	return cond(v1alpha1.ConditionCertificateReady, metav1.ConditionTrue, v1alpha1.ReasonCertificateIssued,
		"%s is valid until %s", what, notAfter.UTC().Format(time.RFC3339)), requeueAfter(left)
}

// leafCertificate parses the first certificate of a PEM chain.
func leafCertificate(chain []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(chain)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM certificate", corev1.TLSCertKey)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", corev1.TLSCertKey, err)
	}
	return cert, nil
}

// certificateCondition writes the Tenant's Certificate when cert-manager is
// installed and judges its status.
func (r *TenantWorkloadReconciler) certificateCondition(ctx context.Context, s *workloadScope) (metav1.Condition, ctrl.Result, error) {
	t := s.tenant
	if _, err := r.RESTMapper().RESTMapping(certificateGVK.GroupKind(), certificateGVK.Version); meta.IsNoMatchError(err) {
		return cond(v1alpha1.ConditionCertificateReady, metav1.ConditionFalse, v1alpha1.ReasonCertManagerNotInstalled,
			"spec.tls.issuerRef needs cert-manager, and its CustomResourceDefinitions (certificates.cert-manager.io/v1) are not installed; install cert-manager or use spec.tls.secretName"), requeueAfter(crdRecheck), nil
	} else if err != nil {
		return metav1.Condition{}, ctrl.Result{}, fmt.Errorf("look up certificates.cert-manager.io: %w", err)
	}
	if err := r.watchControlled(ctx, &r.certWatch, certificateGVK); err != nil {
		return metav1.Condition{}, ctrl.Result{}, fmt.Errorf("watch certificates: %w", err)
	}
	name := tlsSecretName(t)
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(certificateGVK)
	if _, err := r.write(ctx, s, "Certificate", name, cur, client.ApplyConfigurationFromUnstructured(desiredCertificate(t, r.ClusterDomain))); err != nil {
		return metav1.Condition{}, ctrl.Result{}, err
	}
	c, res := r.certificateStatusCondition(t, cur)
	return c, res, nil
}

// certificateStatusCondition reads cert-manager's Ready condition and
// status.notAfter of cur (empty when the Certificate was just created).
func (r *TenantWorkloadReconciler) certificateStatusCondition(t *v1alpha1.Tenant, cur *unstructured.Unstructured) (metav1.Condition, ctrl.Result) {
	name := tlsSecretName(t)
	conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
	for _, x := range conds {
		m, ok := x.(map[string]any)
		if !ok || m["type"] != "Ready" {
			continue
		}
		if m["status"] != string(metav1.ConditionTrue) {
			return cond(v1alpha1.ConditionCertificateReady, metav1.ConditionFalse, v1alpha1.ReasonCertificateNotReady,
				"Certificate %s is not ready: %v: %v", name, m["reason"], m["message"]), ctrl.Result{}
		}
		notAfter, _, _ := unstructured.NestedString(cur.Object, "status", "notAfter")
		at, err := time.Parse(time.RFC3339, notAfter)
		if err != nil {
			return cond(v1alpha1.ConditionCertificateReady, metav1.ConditionTrue, v1alpha1.ReasonCertificateIssued,
				"Certificate %s is ready in Secret %s", name, name), ctrl.Result{}
		}
		return r.expiryCondition(at, fmt.Sprintf("Certificate %s (Secret %s)", name, name))
	}
	return cond(v1alpha1.ConditionCertificateReady, metav1.ConditionFalse, v1alpha1.ReasonCertificateNotReady,
		"cert-manager has not issued Certificate %s yet", name), ctrl.Result{}
}

// tenantsOfTLSSecret maps a provided TLS Secret to the Tenants naming it.
func tenantsOfTLSSecret(ctx context.Context, c client.Reader, o client.Object) []string {
	var l v1alpha1.TenantList
	if err := c.List(ctx, &l, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexTLSSecretName: o.GetName()}); err != nil {
		return nil
	}
	names := make([]string, 0, len(l.Items))
	for _, t := range l.Items {
		names = append(names, t.Name)
	}
	return names
}

// indexTLSSecretName indexes Tenants by spec.tls.secretName.
const indexTLSSecretName = "spec.tls.secretName"

func indexTLSSecret(o client.Object) []string {
	t := o.(*v1alpha1.Tenant)
	if t.Spec.TLS == nil || t.Spec.TLS.SecretName == "" {
		return nil
	}
	return []string{t.Spec.TLS.SecretName}
}
