package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/internal/storetest"
)

// startPoolCluster starts an embedded JetStream server reachable by URL,
// the NATS cluster of the tests' pools, and a store connected to it.
func startPoolCluster(t *testing.T) (*server.Server, *store.Store) {
	t.Helper()
	ns := storetest.Listening(t)
	st, err := store.Connect(store.Options{URL: ns.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return ns, st
}

func newBusPool(ns, name, url string, mods ...func(*v1alpha1.BusPool)) *v1alpha1.BusPool {
	p := &v1alpha1.BusPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.BusPoolSpec{NATS: v1alpha1.ExternalStorage{URL: url, Replicas: 1}}}
	for _, m := range mods {
		m(p)
	}
	return p
}

func busPoolGen(p *v1alpha1.BusPool) int64 { return p.Status.ObservedGeneration }

// TestBusPoolRunsItsReplicas creates a BusPool on a real NATS server and
// checks what the operator makes of it: a StatefulSet of pool replicas
// (`storybus serve --pool`, each named by its pod) spread over nodes and
// zones, with the termination grace period its drain needs, the Services
// and a PodDisruptionBudget of one; the pool's buckets on the cluster; a
// status that reports the cluster reachable and, per replica, the
// workspaces it reports in force and refused; and no write at all once
// nothing changes.
func TestBusPoolRunsItsReplicas(t *testing.T) {
	nats, st := startPoolCluster(t)
	ns := newNamespace(t)
	ctx := context.Background()
	create(t, newBusPool(ns, "shared", nats.ClientURL(), func(p *v1alpha1.BusPool) {
		p.Spec.DrainPeriod = &metav1.Duration{Duration: 20 * time.Second}
		p.Spec.SharedRecords = &v1alpha1.SharedRecords{MaxBytes: resource.MustParse("2Gi")}
	}))

	for _, q := range []string{"512Ki", "2Pi"} {
		small := newBusPool(ns, "bound-"+strings.ToLower(q), nats.ClientURL(), func(p *v1alpha1.BusPool) {
			p.Spec.SharedRecords = &v1alpha1.SharedRecords{MaxBytes: resource.MustParse(q)}
		})
		if err := k8s.Create(ctx, small); err == nil || !strings.Contains(err.Error(), "maxBytes must be between 1Mi and 1Pi") {
			t.Errorf("sharedRecords.maxBytes %s: err = %v, want it refused", q, err)
		}
	}

	p := &v1alpha1.BusPool{}
	waitCondition(t, ns, "shared", p, busPoolGen, v1alpha1.ConditionClusterReady, metav1.ConditionTrue, v1alpha1.ReasonClusterConnected)
	waitCondition(t, ns, "shared", p, busPoolGen, v1alpha1.ConditionAvailable, metav1.ConditionFalse, v1alpha1.ReasonAwaitingTenants)
	if want := ns + "_shared"; p.Status.PoolName != want || p.Status.Replicas != 3 ||
		p.Status.Endpoint != "http://shared-pool."+ns+".svc.cluster.local:8080" {
		t.Errorf("status: poolName %q replicas %d endpoint %q", p.Status.PoolName, p.Status.Replicas, p.Status.Endpoint)
	}
	if r := findCondition(p.Status.Conditions, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.ReasonAwaitingTenants {
		t.Errorf("Ready: %+v", r)
	}
	for _, b := range []string{pool.Bucket(ns + "_shared"), pool.StatusBucket(ns + "_shared")} {
		if _, err := st.JS.KeyValue(ctx, b); err != nil {
			t.Errorf("bucket %s on the cluster: %v", b, err)
		}
	}

	sts := &appsv1.StatefulSet{}
	mustGet(t, ns, "shared-pool", sts)
	if err := isController(sts, p); err != nil {
		t.Error(err)
	}
	spec := sts.Spec.Template.Spec
	c := spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"serve ", "--nats-url " + nats.ClientURL(), "--replicas 1", "--pool " + ns + "_shared", "--pool-replica $(POD_NAME)", "--drain-period 20s", "--listen :8080", "--ops-listen :8081", "--shared-records-max-bytes 2147483648"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}) {
		t.Errorf("env %+v: no POD_NAME from the pod's name", c.Env)
	}
	if *sts.Spec.Replicas != 3 || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement || sts.Spec.ServiceName != "shared-pool-ops" {
		t.Errorf("replicas %d, policy %s, service %s", *sts.Spec.Replicas, sts.Spec.PodManagementPolicy, sts.Spec.ServiceName)
	}
	if u := sts.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateStatefulSetStrategyType ||
		u.RollingUpdate == nil || u.RollingUpdate.Partition == nil || *u.RollingUpdate.Partition != 0 || sts.Spec.MinReadySeconds != 5 {
		t.Errorf("update strategy %+v, minReadySeconds %d: want a rolling update, one replica at a time, each ready 5 s", u, sts.Spec.MinReadySeconds)
	}
	// 20 s of drain, 15 s to finish what is in progress, 10 s of margin.
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 45 {
		t.Errorf("terminationGracePeriodSeconds %v, want 45", g)
	}
	if pr := c.ReadinessProbe; pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != "/readyz" || pr.HTTPGet.Port.String() != "ops" {
		t.Errorf("readiness probe %+v", pr)
	}
	if c.Image != testBusImage || c.Resources.Requests.Cpu().String() != "100m" {
		t.Errorf("image %s, requests %v: want the operator's defaults", c.Image, c.Resources.Requests)
	}
	spread := map[string]corev1.UnsatisfiableConstraintAction{}
	for _, tsc := range spec.TopologySpreadConstraints {
		if tsc.MaxSkew != 1 || tsc.LabelSelector == nil || tsc.LabelSelector.MatchLabels["app.kubernetes.io/instance"] != "shared" ||
			tsc.LabelSelector.MatchLabels["app.kubernetes.io/component"] != "pool" {
			t.Errorf("topology spread %+v", tsc)
		}
		spread[tsc.TopologyKey] = tsc.WhenUnsatisfiable
	}
	if spread[corev1.LabelHostname] != corev1.DoNotSchedule || spread[corev1.LabelTopologyZone] != corev1.ScheduleAnyway {
		t.Errorf("topology spread %v: want hostname DoNotSchedule, zone ScheduleAnyway", spread)
	}
	if sc := spec.SecurityContext; spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken ||
		sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("the pod is not the restricted bus pod: %+v %+v", sc, c.SecurityContext)
	}

	svc := &corev1.Service{}
	mustGet(t, ns, "shared-pool", svc)
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Selector["app.kubernetes.io/component"] != "pool" {
		t.Errorf("service %+v", svc.Spec)
	}
	ops := &corev1.Service{}
	mustGet(t, ns, "shared-pool-ops", ops)
	if ops.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("ops service cluster IP %q, want headless", ops.Spec.ClusterIP)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	mustGet(t, ns, "shared-pool", pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] != "shared" {
		t.Errorf("pdb %+v", pdb.Spec)
	}

	// The replicas' reports, compactly: per replica, the workspaces it
	// serves and the documents it refused.
	sp, err := pool.Open(ctx, st.JS, ns+"_shared", 1)
	if err != nil {
		t.Fatal(err)
	}
	report := func(key string, s pool.Status) {
		t.Helper()
		b, _ := json.Marshal(s)
		if _, err := sp.Statuses.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	report("brand-1.shared-pool-0", pool.Status{Hash: "sha256:1"})
	report("brand-2.shared-pool-0", pool.Status{Hash: "sha256:2", Refused: "sha256:3", Error: "does not compile"})
	report("brand-1.shared-pool-1", pool.Status{Hash: "sha256:1"})
	for i := range 2 {
		startFakePoolPod(t, ns, "shared", fmt.Sprintf("shared-pool-%d", i))
	}
	eventually(t, "the per-replica summary", func() error {
		if err := get(ns, "shared", p); err != nil {
			return err
		}
		want := []v1alpha1.BusPoolReplicaStatus{
			{Name: "shared-pool-0", Ready: true, Workspaces: 2, Refused: 1},
			{Name: "shared-pool-1", Ready: true, Workspaces: 1},
		}
		if !slices.Equal(p.Status.ReplicaStatuses, want) {
			return fmt.Errorf("replica statuses %+v, want %+v", p.Status.ReplicaStatuses, want)
		}
		return nil
	})
	markPoolReady(t, ns, "shared", 3)
	waitCondition(t, ns, "shared", p, busPoolGen, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReady)

	// Settled: nothing is written again.
	versions := func() []string {
		var out []string
		for _, o := range []interface {
			GetResourceVersion() string
		}{sts, svc, ops, pdb, p} {
			out = append(out, o.GetResourceVersion())
		}
		return out
	}
	readAll := func() error {
		for _, read := range []func() error{
			func() error { return get(ns, "shared-pool", sts) }, func() error { return get(ns, "shared-pool", svc) },
			func() error { return get(ns, "shared-pool-ops", ops) }, func() error { return get(ns, "shared-pool", pdb) },
			func() error { return get(ns, "shared", p) },
		} {
			if err := read(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := readAll(); err != nil {
		t.Fatal(err)
	}
	settled := versions()
	consistently(t, "no write once settled", 3*time.Second, func() error {
		if err := readAll(); err != nil {
			return err
		}
		if now := versions(); !slices.Equal(now, settled) {
			return fmt.Errorf("resource versions %v, were %v", now, settled)
		}
		return nil
	})

	// A spec change rolls the StatefulSet: the drain period is in its
	// pods' args and grace period.
	update(t, ns, "shared", &v1alpha1.BusPool{}, func(p *v1alpha1.BusPool) { p.Spec.DrainPeriod = nil })
	eventually(t, "the default drain", func() error {
		if err := get(ns, "shared-pool", sts); err != nil {
			return err
		}
		if g := sts.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 30 || !slices.Contains(sts.Spec.Template.Spec.Containers[0].Args, "5s") {
			return fmt.Errorf("grace %v, args %v", g, sts.Spec.Template.Spec.Containers[0].Args)
		}
		return nil
	})
}

// TestBusPoolUnreachableCluster: a pool whose cluster cannot be reached
// says so, and its replicas' objects are made meanwhile.
func TestBusPoolUnreachableCluster(t *testing.T) {
	ns := newNamespace(t)
	create(t, newBusPool(ns, "far", "nats://127.0.0.1:1"))
	p := &v1alpha1.BusPool{}
	waitCondition(t, ns, "far", p, busPoolGen, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonClusterUnreachable)
	if c := findCondition(p.Status.Conditions, v1alpha1.ConditionClusterReady); c == nil || !strings.Contains(c.Message, "127.0.0.1:1") {
		t.Errorf("ClusterReady %+v: want the URL that failed", c)
	}
	mustGet(t, ns, "far-pool", &appsv1.StatefulSet{})
}

// TestBusPoolNetworkPolicy: a pool that asks for a NetworkPolicy gets one
// selecting its replicas only, with its publish sources and egress to its
// NATS servers; turned off, it goes. The Tenants placed on the pool have
// none of their own: the pool's fences them.
func TestBusPoolNetworkPolicy(t *testing.T) {
	ns := newNamespace(t)
	gateway := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "gateway-system"}},
	}
	create(t, newBusPool(ns, "fenced", "nats://nats.nats-system.svc:4222", func(p *v1alpha1.BusPool) {
		p.Spec.NetworkPolicy = &v1alpha1.TenantNetworkPolicy{Enabled: new(true), PublishFrom: []networkingv1.NetworkPolicyPeer{gateway}}
	}))
	np := &networkingv1.NetworkPolicy{}
	eventually(t, "NetworkPolicy fenced-pool", func() error { return get(ns, "fenced-pool", np) })
	want := map[string]string{"app.kubernetes.io/name": "storybus", "app.kubernetes.io/component": "pool", "app.kubernetes.io/instance": "fenced"}
	if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, want) {
		t.Errorf("pod selector %v, want %v", np.Spec.PodSelector.MatchLabels, want)
	}
	if len(np.Spec.Ingress) == 0 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != HTTPPort || !reflect.DeepEqual(np.Spec.Ingress[0].From, []networkingv1.NetworkPolicyPeer{gateway}) {
		t.Errorf("publish ingress %+v: want the pool's publishFrom", np.Spec.Ingress)
	}
	natsReached := false
	for _, e := range np.Spec.Egress {
		for _, to := range e.To {
			if to.NamespaceSelector != nil && to.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == "nats-system" && e.Ports[0].Port.IntValue() == 4222 {
				natsReached = true
			}
		}
	}
	if !natsReached {
		t.Errorf("egress %+v: want the pool's NATS servers (namespace nats-system, port 4222)", np.Spec.Egress)
	}
	p := &v1alpha1.BusPool{}
	mustGet(t, ns, "fenced", p)
	if err := isController(np, p); err != nil {
		t.Error(err)
	}

	orig := p.DeepCopy()
	p.Spec.NetworkPolicy.Enabled = new(false)
	if err := k8s.Patch(context.Background(), p, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "NetworkPolicy removed", func() error {
		if err := get(ns, "fenced-pool", &networkingv1.NetworkPolicy{}); !apierrors.IsNotFound(err) {
			return errors.Join(errNotYet, err)
		}
		return nil
	})
}

// startFakePoolPod creates a ready replica pod of the pool, as kubelet
// would report it.
func startFakePoolPod(t *testing.T, ns, poolName, name string) {
	t.Helper()
	p := &v1alpha1.BusPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: poolName}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: poolLabels(p)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "bus", Image: testBusImage}}},
	}
	create(t, pod)
	setPodStatus(t, ns, name, corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		},
	})
}

// markPoolReady plays the StatefulSet controller: ready of the pool's
// replicas are ready.
func markPoolReady(t *testing.T, ns, poolName string, ready int32) {
	t.Helper()
	eventually(t, "mark the pool's StatefulSet ready", func() error {
		sts := &appsv1.StatefulSet{}
		if err := get(ns, poolName+"-pool", sts); err != nil {
			return err
		}
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: *sts.Spec.Replicas, ReadyReplicas: ready,
			AvailableReplicas: ready, CurrentReplicas: *sts.Spec.Replicas, UpdatedReplicas: *sts.Spec.Replicas}
		return k8s.Status().Update(context.Background(), sts)
	})
}

// TestPoolRollsToTheOperatorsNewImage: a helm upgrade gives the operator a
// new --bus-image; every pool that names no image of its own gets it in its
// pod template, and nothing else of the template changes, so the
// StatefulSet rolls once, one replica at a time. A pool with its own image
// keeps it.
func TestPoolRollsToTheOperatorsNewImage(t *testing.T) {
	p := &v1alpha1.BusPool{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "pools"},
		Spec: v1alpha1.BusPoolSpec{NATS: v1alpha1.ExternalStorage{URL: "nats://nats:4222"}}}
	before := desiredPoolStatefulSet(p, Options{BusImage: "registry.example/storybus:1.0"})
	after := desiredPoolStatefulSet(p, Options{BusImage: "registry.example/storybus:1.1"})
	image := func(s *appsv1ac.StatefulSetApplyConfiguration) string {
		return *s.Spec.Template.Spec.Containers[0].Image
	}
	if image(before) != "registry.example/storybus:1.0" || image(after) != "registry.example/storybus:1.1" {
		t.Fatalf("images %s, %s", image(before), image(after))
	}
	after.Spec.Template.Spec.Containers[0].Image = before.Spec.Template.Spec.Containers[0].Image
	if !reflect.DeepEqual(before, after) {
		t.Errorf("the new image changed more than the image:\n%+v\n%+v", before.Spec, after.Spec)
	}
	p.Spec.Image = "registry.example/storybus:pinned"
	if got := image(desiredPoolStatefulSet(p, Options{BusImage: "registry.example/storybus:1.1"})); got != p.Spec.Image {
		t.Errorf("a pool's own image: got %s", got)
	}
}
