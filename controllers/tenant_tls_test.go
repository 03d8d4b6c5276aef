package controllers

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/internal/certgen"
	"github.com/storybus/storybus/internal/testutil"
)

// TestTenantTLSProvidedSecret: a Tenant naming a kubernetes.io/tls Secret
// has its bus pods mount it on a volume of their own and serve HTTPS with
// it; the endpoint is https, and CertificateReady gives the certificate's
// expiry.
func TestTenantTLSProvidedSecret(t *testing.T) {
	ns := newNamespace(t)
	for what, bad := range map[string]*v1alpha1.TenantTLS{
		"both":                   {SecretName: "news-cert", IssuerRef: &v1alpha1.IssuerReference{Name: "ca"}},
		"neither":                {},
		"dnsNames with a Secret": {SecretName: "news-cert", DNSNames: []string{"bus.news.example"}},
	} {
		err := k8s.Create(context.Background(), newTenant(ns, "refused", func(tn *v1alpha1.Tenant) { tn.Spec.TLS = bad }))
		if !apierrors.IsInvalid(err) {
			t.Errorf("spec.tls with %s: %v, want refused as invalid", what, err)
		}
	}
	create(t, newTenant(ns, "news", func(tn *v1alpha1.Tenant) {
		tn.Spec.TLS = &v1alpha1.TenantTLS{SecretName: "news-cert"}
	}))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionCertificateReady, metav1.ConditionFalse, v1alpha1.ReasonTLSSecretInvalid)

	ca, err := certgen.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	notAfter := time.Now().Add(48 * time.Hour).Truncate(time.Second).UTC()
	pair, err := ca.Sign(certgen.Leaf{CommonName: "news-bus", Hosts: []string{"news-bus." + ns + ".svc"}, NotAfter: notAfter})
	if err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "news-cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: pair.CertPEM, corev1.TLSPrivateKeyKey: pair.KeyPEM},
	})
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionCertificateReady, metav1.ConditionTrue, v1alpha1.ReasonCertificateIssued)
	if msg := findCondition(tn.Status.Conditions, v1alpha1.ConditionCertificateReady).Message; !strings.Contains(msg, notAfter.Format(time.RFC3339)) {
		t.Errorf("CertificateReady %q does not give the expiry %s", msg, notAfter.Format(time.RFC3339))
	}
	if want := "https://news-bus." + ns + ".svc.cluster.local:8080"; tn.Status.Endpoint != want {
		t.Errorf("endpoint %q, want %q", tn.Status.Endpoint, want)
	}

	sts := &appsv1.StatefulSet{}
	eventually(t, "statefulset", func() error { return get(ns, "news-bus", sts) })
	assertTLSPod(t, sts, "news-cert")

	// Without spec.tls the bus is plain HTTP again and the condition goes.
	update(t, ns, "news", tn, func(tn *v1alpha1.Tenant) { tn.Spec.TLS = nil })
	eventually(t, "plain http", func() error {
		if err := get(ns, "news", tn); err != nil {
			return err
		}
		if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionCertificateReady); c != nil || !strings.HasPrefix(tn.Status.Endpoint, "http://") {
			return fmt.Errorf("endpoint %s, CertificateReady %+v", tn.Status.Endpoint, c)
		}
		if err := get(ns, "news-bus", sts); err != nil {
			return err
		}
		if slices.Contains(sts.Spec.Template.Spec.Containers[0].Args, "--tls-cert-file") {
			return fmt.Errorf("bus args still have TLS: %v", sts.Spec.Template.Spec.Containers[0].Args)
		}
		return nil
	})
}

// assertTLSPod checks that the bus pods mount secret at TLSDir on a volume
// of its own and pass the files to the bus, and that the probes stay on
// the plain operations port.
func assertTLSPod(t *testing.T, sts *appsv1.StatefulSet, secret string) {
	t.Helper()
	pod := sts.Spec.Template.Spec
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == tlsVolume {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != secret {
		t.Fatalf("no secret volume %s of Secret %s in %+v", tlsVolume, secret, pod.Volumes)
	}
	c := pod.Containers[0]
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == tlsVolume && m.MountPath == TLSDir && m.ReadOnly && m.SubPath == ""
	}) {
		t.Errorf("no read-only mount of %s at %s (a subPath would never see a renewal): %+v", tlsVolume, TLSDir, c.VolumeMounts)
	}
	args := strings.Join(c.Args, " ")
	if want := "--tls-cert-file " + TLSDir + "/tls.crt --tls-key-file " + TLSDir + "/tls.key"; !strings.Contains(args, want) {
		t.Errorf("bus args %q lack %q", args, want)
	}
	if p := c.ReadinessProbe.HTTPGet; p == nil || p.Port.String() != "ops" || p.Scheme == corev1.URISchemeHTTPS {
		t.Errorf("readiness probe %+v, want plain HTTP on the ops port", c.ReadinessProbe)
	}
}

// TestTenantTLSCertManager: without the cert-manager CRDs an issuerRef
// Tenant says so; once they are installed (cert-manager's own, from the
// version pinned in hack/tools/cert-manager), the operator writes a
// Certificate the real schema accepts, for the bus Service's names and
// spec.tls.dnsNames, into <tenant>-tls, and reflects its status. It
// installs the CRDs into the suite's API server, so it runs once per
// suite.
func TestTenantTLSCertManager(t *testing.T) {
	ns := newNamespace(t)
	create(t, newTenant(ns, "news", func(tn *v1alpha1.Tenant) {
		tn.Spec.TLS = &v1alpha1.TenantTLS{
			IssuerRef: &v1alpha1.IssuerReference{Name: "newsroom-ca", Kind: "ClusterIssuer"},
			DNSNames:  []string{"bus.news.example"},
		}
	}))
	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionCertificateReady, metav1.ConditionFalse, v1alpha1.ReasonCertManagerNotInstalled)
	if msg := findCondition(tn.Status.Conditions, v1alpha1.ConditionCertificateReady).Message; !strings.Contains(msg, "certificates.cert-manager.io") {
		t.Errorf("CertManagerNotInstalled %q does not name the missing CRD", msg)
	}
	if !strings.HasPrefix(tn.Status.Endpoint, "https://") {
		t.Errorf("endpoint %q, want https", tn.Status.Endpoint)
	}

	if _, err := envtest.InstallCRDs(restConfig, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(certManagerDir(t), "deploy", "crds")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatalf("install cert-manager CRDs: %v", err)
	}

	cert := &unstructured.Unstructured{}
	cert.SetGroupVersionKind(certificateGVK)
	eventuallyAfterRecheck(t, "Certificate news-tls", func() error { return get(ns, "news-tls", cert) })
	if err := isController(cert, tn); err != nil {
		t.Error(err)
	}
	if got, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); got != "news-tls" {
		t.Errorf("secretName %q, want news-tls", got)
	}
	names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	want := []string{"news-bus", "news-bus." + ns, "news-bus." + ns + ".svc", "news-bus." + ns + ".svc.cluster.local", "bus.news.example"}
	if !slices.Equal(names, want) {
		t.Errorf("dnsNames %v, want %v", names, want)
	}
	if usages, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "usages"); !slices.Equal(usages, []string{"server auth"}) {
		t.Errorf("usages %v, want [server auth]", usages)
	}
	if rotation, _, _ := unstructured.NestedString(cert.Object, "spec", "privateKey", "rotationPolicy"); rotation != "Always" {
		t.Errorf("privateKey.rotationPolicy %q, want Always", rotation)
	}
	issuer, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
	if issuer["name"] != "newsroom-ca" || issuer["kind"] != "ClusterIssuer" || issuer["group"] != "cert-manager.io" {
		t.Errorf("issuerRef %v", issuer)
	}
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionCertificateReady, metav1.ConditionFalse, v1alpha1.ReasonCertificateNotReady)

	sts := &appsv1.StatefulSet{}
	eventually(t, "statefulset", func() error { return get(ns, "news-bus", sts) })
	assertTLSPod(t, sts, "news-tls")

	// cert-manager's part: the Certificate is issued.
	notAfter := time.Now().Add(90 * 24 * time.Hour).Truncate(time.Second).UTC()
	if err := unstructured.SetNestedField(cert.Object, map[string]any{
		"notAfter": notAfter.Format(time.RFC3339),
		"conditions": []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "Ready", "message": "Certificate is up to date and has not expired",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}},
	}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Status().Update(context.Background(), cert); err != nil {
		t.Fatalf("write Certificate status: %v", err)
	}
	waitCondition(t, ns, "news", tn, tenantGen, v1alpha1.ConditionCertificateReady, metav1.ConditionTrue, v1alpha1.ReasonCertificateIssued)
	if msg := findCondition(tn.Status.Conditions, v1alpha1.ConditionCertificateReady).Message; !strings.Contains(msg, notAfter.Format(time.RFC3339)) {
		t.Errorf("CertificateReady %q does not give notAfter %s", msg, notAfter.Format(time.RFC3339))
	}

	// A pooled Tenant has no Service of its own: its Certificate covers
	// its own names only, with no common name (a host name may be longer
	// than one may be).
	create(t, newTenant(ns, "pooled", func(tn *v1alpha1.Tenant) {
		tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared"}
		tn.Spec.TLS = &v1alpha1.TenantTLS{
			IssuerRef: &v1alpha1.IssuerReference{Name: "newsroom-ca", Kind: "ClusterIssuer"},
			DNSNames:  []string{"news.pooled.example"},
		}
	}))
	pooled := &unstructured.Unstructured{}
	pooled.SetGroupVersionKind(certificateGVK)
	eventually(t, "Certificate pooled-tls", func() error { return get(ns, "pooled-tls", pooled) })
	if names, _, _ := unstructured.NestedStringSlice(pooled.Object, "spec", "dnsNames"); !slices.Equal(names, []string{"news.pooled.example"}) {
		t.Errorf("a pooled Tenant's dnsNames %v, want only its own name", names)
	}
	if cn, found, _ := unstructured.NestedString(pooled.Object, "spec", "commonName"); found {
		t.Errorf("a pooled Tenant's Certificate has commonName %q", cn)
	}
}

// eventuallyAfterRecheck waits longer than eventually: the operator looks
// for newly installed CRDs every crdRecheck.
func eventuallyAfterRecheck(t *testing.T, what string, f func() error) {
	t.Helper()
	testutil.Eventually(t, what, 3*crdRecheck+waitFor, f)
}

// certManagerDir is the directory of the cert-manager module pinned in
// hack/tools/cert-manager.
func certManagerDir(t *testing.T) string {
	return pinnedModuleDir(t, "cert-manager", "github.com/cert-manager/cert-manager")
}

// pinnedModuleDir is the directory, in the module cache, of module at the
// version the tools module hack/tools/<tool> pins.
func pinnedModuleDir(t *testing.T, tool, module string) string {
	t.Helper()
	return testutil.PinnedModuleDir(t, "..", tool, module)
}
