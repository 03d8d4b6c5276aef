package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus"
)

// fakeBus plays a Tenant's bus pods for the operator's HTTP prober: Pod
// objects, ready, whose IP and "ops" port reach an HTTP server answering
// /configz as the bus does. It reports the hash of the Tenant's ConfigMap
// as the API server holds it now (a bus that reloads at once), or a hash
// pinned by the test (a bus that has not reloaded yet).
type fakeBus struct {
	ns, tenant string
	pinned     atomic.Pointer[string]
}

// serveTenant waits for the Tenant's StatefulSet, marks it ready and
// starts its fake bus pods, one per desired replica.
func serveTenant(t *testing.T, ns, tenant string) *fakeBus {
	t.Helper()
	b := &fakeBus{ns: ns, tenant: tenant}
	srv := httptest.NewServer(http.HandlerFunc(b.configz))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	markReady(t, ns, tenant)
	sts := &appsv1.StatefulSet{}
	mustGet(t, ns, tenant+"-bus", sts)
	for i := range *sts.Spec.Replicas {
		startFakePod(t, ns, tenant, fmt.Sprintf("%s-bus-%d", tenant, i), "127.0.0.1", int32(p))
	}
	return b
}

// startFakePod creates a ready bus pod of the Tenant whose operations port
// is ip:port.
func startFakePod(t *testing.T, ns, tenant, name, ip string, port int32) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: tenantLabels(&v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: tenant}})},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "bus", Image: testBusImage,
			Ports: []corev1.ContainerPort{{Name: opsPortName, ContainerPort: port, Protocol: corev1.ProtocolTCP}},
		}}},
	}
	if err := k8s.Create(context.Background(), pod); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	setPodStatus(t, ns, name, corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		},
	})
}

// setPodStatus plays kubelet: it writes a pod's status.
func setPodStatus(t *testing.T, ns, name string, st corev1.PodStatus) {
	t.Helper()
	eventually(t, "status of pod "+name, func() error {
		pod := &corev1.Pod{}
		if err := get(ns, name, pod); err != nil {
			return err
		}
		pod.Status = st
		return k8s.Status().Update(context.Background(), pod)
	})
}

// pin makes the pods report hash, whatever the ConfigMap holds; "" lets
// them follow the ConfigMap again.
func (b *fakeBus) pin(hash string) { b.pinned.Store(&hash) }

func (b *fakeBus) configz(w http.ResponseWriter, _ *http.Request) {
	hash := ""
	if p := b.pinned.Load(); p != nil && *p != "" {
		hash = *p
	} else {
		cm := &corev1.ConfigMap{}
		if err := get(b.ns, b.tenant+"-bus-config", cm); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		doc, err := config.Parse([]byte(cm.Data[ConfigFile]))
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		hash = doc.Hash
	}
	_ = json.NewEncoder(w).Encode(map[string][]bus.LoadedConfig{"workspaces": {{Workspace: b.tenant, ConfigHash: hash}}})
}
