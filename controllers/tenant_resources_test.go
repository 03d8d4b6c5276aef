package controllers

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
			args := strings.Join(busArgs(tn), " ")
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
