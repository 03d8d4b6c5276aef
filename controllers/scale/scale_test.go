// Package scale measures the operator at scale: Tenants with ten
// Connections (and a Grant each) reconcile to Ready against a real
// kube-apiserver and etcd (envtest), with the operator run as its own
// process (`storybus operator`), so that its resident memory is its own.
//
// By default the test runs a small size (20 Tenants, 200 Connections) to
// keep `make test` short. STORYBUS_SCALE=full (or `make scale`) runs 500
// Tenants with 5,000 Connections; STORYBUS_SCALE_TENANTS=N sets any size,
// and STORYBUS_SCALE_WORKERS=N the operator's --max-concurrent-reconciles;
// STORYBUS_SCALE_MEMORY_LIMIT its --memory-limit;
// STORYBUS_SCALE_PROFILE=dir takes the operator's CPU profiles while it
// converges, and its heap once all are Ready, into dir.
// Run with -v for the numbers docs/performance.md records.
//
// pool_test.go, built with the scale tag (make scale-pool), is the bus
// pool's benchmark: Tenants placed on a BusPool of three replica
// processes on a three-node NATS cluster.
//
// Once all are Ready, the operator must make no more writes: for a little
// longer than its --sync-period (10 s, 2 min with STORYBUS_SCALE=full;
// STORYBUS_SCALE_SYNC sets another), through its resync (whose events
// reach the watches without a predicate) and with the statuses of the bus
// pods and their StatefulSets changing all the while, it may send no POST,
// PUT, PATCH or DELETE (its rest_client_requests_total by verb), nor read
// any object past its cache (storybus_operator_uncached_reads_total): its
// cache holds what it compares. Then one
// Connection's secret is rotated, and the time until the new secret is in
// force is reported. Under
// go test -race (make race) the operator is built with the race detector
// and its first data race fails the run.
package scale_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/controllers"
	"github.com/storybus/storybus/internal/testutil"
)

// connectionsPerTenant is fixed; the number of Tenants varies.
const connectionsPerTenant = 10

// tenants is the size of the run: small by default, see the package comment.
func tenants(t *testing.T) int {
	if s := os.Getenv("STORYBUS_SCALE_TENANTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("STORYBUS_SCALE_TENANTS=%q: want a positive number", s)
		}
		return n
	}
	if os.Getenv("STORYBUS_SCALE") == "full" {
		return 500
	}
	return 20
}

// syncPeriod is the operator's --sync-period in the run.
func syncPeriod(t *testing.T) time.Duration {
	if s := os.Getenv("STORYBUS_SCALE_SYNC"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("STORYBUS_SCALE_SYNC=%q: want a positive duration", s)
		}
		return d
	}
	if os.Getenv("STORYBUS_SCALE") == "full" {
		return 2 * time.Minute
	}
	return 10 * time.Second
}

func TestOperatorAtScale(t *testing.T) {
	nTenants := tenants(t)
	sync := syncPeriod(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join("..", "..", "bin")
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	// Every Tenant has a ClusterIP Service: envtest's default range (/24)
	// holds 254 of them.
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.96.0.0/16")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest (make tools builds its binaries): %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // the test's own writes are not the measured part
	k8s, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// The operator runs as `storybus operator` against the envtest API
	// server, as an administrator.
	user, err := env.AddUser(envtest.User{Name: "storybus-operator", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	binary := filepath.Join(dir, "storybus")
	// Under go test -race the operator process runs under the race
	// detector too, and stops at its first report: the test then fails at
	// once with the report in the operator's log.
	build := exec.Command("go", append(append([]string{"build", "-o", binary}, testutil.RaceBuildFlags()...), "./cmd/storybus")...)
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	metricsAddr, probeAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	args := []string{"operator", "--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false", "--health-probe-bind-address", probeAddr, "--log-level", "error",
		"--sync-period", sync.String()}
	// STORYBUS_SCALE_PPROF=host:port serves the operator's profiles there;
	// STORYBUS_SCALE_PROFILE=dir takes its CPU profiles while it converges
	// and its heap once all are Ready, into dir.
	pprofAddr, profileDir := os.Getenv("STORYBUS_SCALE_PPROF"), os.Getenv("STORYBUS_SCALE_PROFILE")
	if pprofAddr == "" && profileDir != "" {
		pprofAddr = testutil.FreeAddr(t)
	}
	if pprofAddr != "" {
		args = append(args, "--pprof-bind-address", pprofAddr)
	}
	// STORYBUS_SCALE_MEMORY_LIMIT=256Mi runs it as the chart does with that
	// limit (its --memory-limit).
	if l := os.Getenv("STORYBUS_SCALE_MEMORY_LIMIT"); l != "" {
		args = append(args, "--memory-limit", l)
	}
	if n := os.Getenv("STORYBUS_SCALE_WORKERS"); n != "" {
		args = append(args, "--max-concurrent-reconciles", n)
	}
	operator := exec.Command(binary, args...)
	operator.Env = testutil.RaceEnv()
	var logs bytes.Buffer
	operator.Stdout, operator.Stderr = &logs, &logs
	if err := operator.Start(); err != nil {
		t.Fatal(err)
	}
	// exited reports the operator's end: a crash fails the run at once,
	// with its log, instead of waiting out the deadline.
	began := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- operator.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = operator.Process.Kill()
			<-exited
		}
		if t.Failed() && !stopped {
			t.Logf("operator logs:\n%s", logs.String())
		}
	})
	operatorExited := func() {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the operator exited (%v) %s after it started; its log:\n%s", err, time.Since(began).Round(time.Second), logs.String())
		default:
		}
	}

	ns := "scale"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// envtest runs no StatefulSet controller and no kubelet: this plays
	// them, making every StatefulSet's replicas ready and starting its bus
	// pods, whose operations port answers /configz with the configuration
	// the Tenant's ConfigMap holds (buses that load every change at once).
	buses := startFakeBuses(ctx, t, k8s, ns)
	go markStatefulSetsReady(ctx, t, k8s, ns, buses)

	// Readiness is followed through watches, as kubectl wait does:
	// listing thousands of objects every second would load the API server
	// the operator is measured against.
	followed := followReadiness(ctx, t, cfg, scheme, ns)

	var prof *profiler
	if profileDir != "" {
		prof = startProfiling(t, pprofAddr, profileDir)
	}
	cpuBefore := processCPU(nil)
	start := time.Now()
	createAll(ctx, t, k8s, ns, nTenants, operatorExited)
	created := time.Since(start)
	lastCreate := time.Now()

	deadline := start.Add(time.Duration(nTenants)*2*time.Second + 2*time.Minute)
	var ready readiness
	for {
		ready, err = countReady(ctx, followed, ns)
		if err == nil && ready.tenants == nTenants && ready.connections == nTenants*connectionsPerTenant && ready.grants == nTenants*connectionsPerTenant {
			break
		}
		operatorExited()
		if time.Now().After(deadline) {
			t.Fatalf("not all Ready after %s: %d Tenants, %d Connections, %d Grants (%v); not Ready:\n%s", time.Since(start).Round(time.Second),
				ready.tenants, ready.connections, ready.grants, err, strings.Join(ready.notReady, "\n"))
		}
		time.Sleep(time.Second)
	}
	allReady := time.Since(start)
	sinceLast := time.Since(lastCreate)
	cpuUntilReady := cpuSince(cpuBefore, nil)
	if prof != nil {
		prof.stop(t)
	}

	m, err := scrape(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	writesUntilReady, err := writes(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	mib := func(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }
	t.Logf("operator at scale: %d Tenants, %d Connections, %d Grants; operator %q", nTenants, nTenants*connectionsPerTenant, nTenants*connectionsPerTenant, args[1:])
	t.Logf("created in %s; all Ready %s after the first create", created.Round(time.Millisecond), allReady.Round(time.Millisecond))
	t.Logf("operator memory when all Ready: resident %s (peak seen %s), Go heap in use %s",
		mib(m["process_resident_memory_bytes"]), mib(float64(peakResident(operator.Process.Pid))), mib(m["go_memstats_heap_inuse_bytes"]))
	t.Logf("operator resident memory by kind: %s; Go runtime: %s from the OS, heap idle %s of which %s returned, stacks %s, next collection at %s of heap",
		residentParts(operator.Process.Pid), mib(m["go_memstats_sys_bytes"]), mib(m["go_memstats_heap_idle_bytes"]),
		mib(m["go_memstats_heap_released_bytes"]), mib(m["go_memstats_stack_sys_bytes"]), mib(m["go_memstats_next_gc_bytes"]))
	t.Logf("operator CPU time: %.1f s", m["process_cpu_seconds_total"])
	t.Logf("all Ready %s after the last create", sinceLast.Round(time.Millisecond))
	t.Logf("CPU of each process from the first create to all Ready: %s", cpuUntilReady)
	t.Logf("operator writes until all Ready: %v, %.1f per Tenant (with its 10 Connections and Grants)", writesUntilReady, float64(writesUntilReady.total())/float64(nTenants))
	if w, err := apiserverWrites(cfg); err == nil {
		t.Logf("writes the API server answered until all Ready, by verb and resource (the test's own creates and status updates included): %v", w)
	} else {
		t.Logf("writes the API server answered: unread: %v", err)
	}
	if r, err := reconciles(metricsAddr); err == nil {
		t.Logf("reconciles until all Ready, by controller (count, seconds): %v", r)
	} else {
		t.Logf("reconciles: unread: %v", err)
	}
	if n, byReason, err := countEvents(ctx, k8s, ns); err == nil {
		t.Logf("Events in the namespace when all Ready: %d, %.1f per Tenant %v", n, float64(n)/float64(nTenants), byReason)
	} else {
		t.Logf("Events not counted: %v", err)
	}

	// Steady state: a resync of everything, and the statuses of the bus
	// pods and their StatefulSets changing, write and read nothing.
	window := sync + sync/4
	readsUntilReady, err := uncachedReads(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	churned := churnPods(ctx, t, k8s, ns, window, operatorExited)
	steady, err := writes(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	steadyReads, err := uncachedReads(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	extra, reads := steady.minus(writesUntilReady), steadyReads-readsUntilReady
	t.Logf("steady state, %s (--sync-period %s) with %d status changes of bus pods and their StatefulSets: operator writes %v, reads past its cache %.0f (%.0f until all Ready)",
		window.Round(time.Second), sync, churned, extra, reads, readsUntilReady)
	if extra.total() != 0 {
		t.Errorf("the operator wrote in steady state: %v (nothing changed that it writes)", extra)
	}
	if reads != 0 {
		t.Errorf("the operator read %.0f objects past its cache in steady state (its cache holds what it compares)", reads)
	}

	rotated := rotateOne(ctx, t, k8s, ns, operatorExited)
	t.Logf("one Connection's secret rotated: in force (its Tenant Ready with the new configuration) after %s", rotated.Round(time.Millisecond))
	final, err := scrape(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("operator at the end: resident %s, Go heap in use %s, CPU %.1f s", mib(final["process_resident_memory_bytes"]), mib(final["go_memstats_heap_inuse_bytes"]), final["process_cpu_seconds_total"])
	target := func(name string, ok bool, got string) {
		verdict := "met"
		if !ok {
			verdict = "NOT met"
		}
		t.Logf("target %s: %s (%s)", name, verdict, got)
	}
	target("all Ready <= 30 s after the last create", sinceLast <= 30*time.Second, sinceLast.Round(time.Second).String())
	target("operator CPU <= 20 s until all Ready", m["process_cpu_seconds_total"] <= 20, fmt.Sprintf("%.1f s", m["process_cpu_seconds_total"]))
	target("RSS <= 150 MiB when all Ready", m["process_resident_memory_bytes"] <= 150<<20, mib(m["process_resident_memory_bytes"]))
	target("no writes in steady state", extra.total() == 0, extra.String())
	target("one rotation in force <= 5 s", rotated <= 5*time.Second, rotated.Round(time.Millisecond).String())
}

// followReadiness returns an informer cache of the Tenants, Connections
// and Grants of ns, synced, for countReady.
func followReadiness(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, ns string) client.Reader {
	ctrllog.SetLogger(logr.Discard()) // the cache's informers log through it
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	for _, o := range []client.Object{&v1alpha1.Tenant{}, &v1alpha1.Connection{}, &v1alpha1.Grant{}} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			t.Fatalf("follow readiness: %v", err)
		}
	}
	return c
}

// countEvents counts the Events in ns (each a write of the operator's:
// the test records none) and how many have each reason.
func countEvents(ctx context.Context, k8s client.Client, ns string) (int, map[string]int, error) {
	byReason := map[string]int{}
	n := 0
	opts := []client.ListOption{client.InNamespace(ns), client.Limit(500)}
	for {
		var l eventsv1.EventList
		if err := k8s.List(ctx, &l, opts...); err != nil {
			return 0, nil, err
		}
		for _, e := range l.Items {
			n++
			byReason[e.Regarding.Kind+"/"+e.Reason]++
		}
		if l.Continue == "" {
			return n, byReason, nil
		}
		opts = []client.ListOption{client.InNamespace(ns), client.Limit(500), client.Continue(l.Continue)}
	}
}

// apiserverWrites reads the API server's apiserver_request_total: the
// writes it answered, by verb and resource, every client's.
func apiserverWrites(cfg *rest.Config) (map[string]float64, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	families, err := metricFamilies(hc, strings.TrimSuffix(cfg.Host, "/")+"/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		verb := label(m, "verb")
		switch verb {
		case "GET", "LIST", "WATCH":
			continue
		}
		key := verb + " " + label(m, "resource")
		if sub := label(m, "subresource"); sub != "" {
			key += "/" + sub
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out, nil
}

// reconciles reads, by controller, the reconciles so far and the seconds
// they took, from controller-runtime's metrics.
func reconciles(addr string) (map[string]string, error) {
	families, err := operatorMetrics(addr)
	if err != nil {
		return nil, err
	}
	count, took := map[string]float64{}, map[string]float64{}
	results := map[string]string{} // the counts of results other than success
	for _, m := range families["controller_runtime_reconcile_total"].GetMetric() {
		name, v := label(m, "controller"), m.GetCounter().GetValue()
		count[name] += v
		if result := label(m, "result"); result != "success" && v > 0 {
			results[name] += fmt.Sprintf(", %s %.0f", result, v)
		}
	}
	for _, m := range families["controller_runtime_reconcile_time_seconds"].GetMetric() {
		took[label(m, "controller")] += m.GetHistogram().GetSampleSum()
	}
	out := map[string]string{}
	for name, n := range count {
		out[name] = fmt.Sprintf("%.0f%s, %.1f s", n, results[name], took[name])
	}
	return out, nil
}

// verbs counts the operator's writes to the API server by verb.
type verbs map[string]float64

// writes reads the operator's writes so far from its
// rest_client_requests_total.
func writes(addr string) (verbs, error) {
	families, err := operatorMetrics(addr)
	if err != nil {
		return nil, err
	}
	out := verbs{}
	for _, m := range families["rest_client_requests_total"].GetMetric() {
		switch method := label(m, "method"); method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			out[method] += m.GetCounter().GetValue()
		}
	}
	return out, nil
}

func (v verbs) total() float64 {
	n := 0.0
	for _, x := range v {
		n += x
	}
	return n
}

func (v verbs) minus(w verbs) verbs {
	out := verbs{}
	for k, x := range v {
		if d := x - w[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func (v verbs) String() string {
	if len(v) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if v[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, v[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// churnPods changes the status of the namespace's bus pods (a condition's
// probe time) and of their StatefulSets (the current revision), a few
// dozen a second, for d; it returns how many statuses it changed.
func churnPods(ctx context.Context, t *testing.T, k8s client.Client, ns string, d time.Duration, checkOperator func()) int {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	changed := 0
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		if len(pods.Items) == 0 {
			time.Sleep(time.Second)
			continue
		}
		p := &pods.Items[i%len(pods.Items)]
		for j := range p.Status.Conditions {
			p.Status.Conditions[j].LastProbeTime = metav1.Now()
		}
		if err := k8s.Status().Update(ctx, p); err != nil {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		changed++
		// Its StatefulSet's status changes too (its revision, which the
		// operator does not report), as the StatefulSet controller's would.
		if at := strings.LastIndexByte(p.Name, '-'); at > 0 {
			sts := &appsv1.StatefulSet{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.Name[:at]}, sts); err == nil {
				sts.Status.CurrentRevision = fmt.Sprintf("%s-%d", sts.Name, i)
				if err := k8s.Status().Update(ctx, sts); err == nil {
					changed++
				}
			}
		}
		if i%50 == 49 {
			checkOperator()
			time.Sleep(time.Second)
		}
	}
	return changed
}

// rotateOne rotates the first Tenant's first Connection's secret and waits
// until it is in force: compiled into the configuration every bus pod
// serves. It returns how long that took.
func rotateOne(ctx context.Context, t *testing.T, k8s client.Client, ns string, checkOperator func()) time.Duration {
	t.Helper()
	c := &v1alpha1.Connection{}
	key := client.ObjectKey{Namespace: ns, Name: "t000-c00"}
	if err := k8s.Get(ctx, key, c); err != nil {
		t.Fatal(err)
	}
	c.Spec.Credentials.Rotate++
	start := time.Now()
	if err := k8s.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	for {
		if err := k8s.Get(ctx, key, c); err != nil {
			t.Fatal(err)
		}
		in := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionInForce)
		if in != nil && in.Status == metav1.ConditionTrue && in.ObservedGeneration == c.Generation && c.Status.ObservedRotate == c.Spec.Credentials.Rotate {
			return time.Since(start)
		}
		checkOperator()
		if time.Since(start) > time.Minute {
			t.Fatalf("the rotation is not in force after a minute: %+v", c.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createAll creates nTenants Tenants, each with connectionsPerTenant
// Connections and one Grant per Connection, from a few writers at once.
//
// checkOperator is called between Tenants: it fails the test when the
// operator has exited.
func createAll(ctx context.Context, t *testing.T, k8s client.Client, ns string, nTenants int, checkOperator func()) {
	t.Helper()
	jobs := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				if err := createTenant(ctx, k8s, ns, i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	// A failed check ends the test here: the writers still stop.
	closeJobs := sync.OnceFunc(func() { close(jobs) })
	defer closeJobs()
	for i := range nTenants {
		jobs <- i
		if i%10 == 9 {
			checkOperator()
		}
	}
	closeJobs()
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

func createTenant(ctx context.Context, k8s client.Client, ns string, i int) error {
	name := fmt.Sprintf("t%03d", i)
	objs := []client.Object{&v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
	for j := range connectionsPerTenant {
		conn := fmt.Sprintf("%s-c%02d", name, j)
		objs = append(objs,
			&v1alpha1.Connection{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: conn},
				Spec:       v1alpha1.ConnectionSpec{TenantRef: v1alpha1.LocalObjectReference{Name: name}},
			},
			&v1alpha1.Grant{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: conn},
				Spec: v1alpha1.GrantSpec{ConnectionRef: v1alpha1.LocalObjectReference{Name: conn},
					Publish: &v1alpha1.PublishGrant{SystemIDs: []string{conn}, MessageTypes: []string{"story.context", "story.event"}}},
			})
	}
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

type readiness struct {
	tenants, connections, grants int
	// notReady describes a few of the objects not Ready, for the failure.
	notReady []string
}

// countReady counts the objects whose Ready condition is True for their
// current generation; a Tenant also needs all of its connections compiled.
func countReady(ctx context.Context, k8s client.Reader, ns string) (readiness, error) {
	var r readiness
	isReady := func(cs []metav1.Condition, gen int64) bool {
		c := meta.FindStatusCondition(cs, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen
	}
	// Only read: a cache's lists need not be copied.
	var ts v1alpha1.TenantList
	if err := k8s.List(ctx, &ts, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return r, err
	}
	for _, x := range ts.Items {
		if isReady(x.Status.Conditions, x.Generation) && x.Status.Connections == connectionsPerTenant {
			r.tenants++
		} else if len(r.notReady) < 5 {
			r.notReady = append(r.notReady, describeNotReady(ctx, k8s, "Tenant", &x, x.Name))
		}
	}
	// The kinds are counted in turn, each once the one before is all Ready:
	// listing thousands of objects every poll would load the API server
	// the operator is measured against.
	if r.tenants < len(ts.Items) {
		return r, nil
	}
	var cs v1alpha1.ConnectionList
	if err := k8s.List(ctx, &cs, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return r, err
	}
	for _, x := range cs.Items {
		if isReady(x.Status.Conditions, x.Generation) {
			r.connections++
		}
	}
	if r.connections < len(cs.Items) {
		return r, nil
	}
	var gs v1alpha1.GrantList
	if err := k8s.List(ctx, &gs, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return r, err
	}
	for _, x := range gs.Items {
		if isReady(x.Status.Conditions, x.Generation) {
			r.grants++
		} else if len(r.notReady) < 5 {
			r.notReady = append(r.notReady, describeNotReady(ctx, k8s, "Grant", &x, x.Status.Tenant))
		}
	}
	return r, nil
}

// describeNotReady says what an object not Ready shows, and what its
// Tenant shows of it.
func describeNotReady(ctx context.Context, k8s client.Reader, kind string, obj v1alpha1.ConditionedObject, tenant string) string {
	o := obj.(client.Object)
	out := fmt.Sprintf("%s %s (generation %d, created %s): %+v", kind, o.GetName(), o.GetGeneration(), o.GetCreationTimestamp().Format(time.RFC3339), obj.GetConditions())
	if tenant == "" {
		tenant, _, _ = strings.Cut(o.GetName(), "-")
	}
	var t v1alpha1.Tenant
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: tenant}, &t); err == nil {
		for _, c := range t.Status.Compiled {
			if c.Kind == kind && c.Name == o.GetName() {
				out += fmt.Sprintf("; Tenant %s compiled it at generation %d", tenant, c.Generation)
			}
		}
		out += fmt.Sprintf("; Tenant configHash %s loaded %s, configGeneration %d", t.Status.ConfigHash, t.Status.LoadedConfigHash, t.Status.ConfigGeneration)
	}
	return out
}

// fakeBuses answers /configz for the namespace's bus pods: each
// StatefulSet's pods at an address of their own, answering with their
// workspace alone, as a dedicated bus does.
type fakeBuses struct {
	t      *testing.T
	hashes sync.Map // workspace id -> configuration hash

	// fixed, when set, is the one port every pod names (the pool's
	// replicas, which listen on their own).
	fixed int32
	mu    sync.Mutex
	ports map[string]int32 // workspace id -> port of its /configz
}

// startFakeBuses follows the namespace's ConfigMaps, until ctx ends, for
// the /configz servers startPods starts.
func startFakeBuses(ctx context.Context, t *testing.T, k8s client.WithWatch, ns string) *fakeBuses {
	b := &fakeBuses{t: t, ports: map[string]int32{}}
	go func() {
		for ctx.Err() == nil {
			w, err := k8s.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) || cm.Data[controllers.ConfigFile] == "" {
					continue
				}
				if doc, err := config.Parse([]byte(cm.Data[controllers.ConfigFile])); err == nil {
					b.hashes.Store(doc.ID, doc.Hash)
				}
			}
			w.Stop()
		}
	}()
	return b
}

// port returns the port of workspace's /configz server, starting it on
// first use; it stops with the test.
func (b *fakeBuses) port(workspace string) int32 {
	if b.fixed != 0 {
		return b.fixed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.ports[workspace]; ok {
		return p
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var loaded []bus.LoadedConfig
		if hash, ok := b.hashes.Load(workspace); ok {
			loaded = append(loaded, bus.LoadedConfig{Workspace: workspace, ConfigHash: hash.(string)})
		}
		_ = json.NewEncoder(w).Encode(map[string][]bus.LoadedConfig{"workspaces": loaded})
	}))
	b.t.Cleanup(srv.Close)
	p := int32(srv.Listener.Addr().(*net.TCPAddr).Port)
	b.ports[workspace] = p
	return p
}

// startPods creates the StatefulSet's pods, ready, with their operations
// port at their workspace's /configz server.
func (b *fakeBuses) startPods(ctx context.Context, t *testing.T, k8s client.Client, sts *appsv1.StatefulSet, n int32) {
	port := b.port(sts.Spec.Template.Labels["app.kubernetes.io/instance"])
	for i := range n {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: fmt.Sprintf("%s-%d", sts.Name, i), Labels: sts.Spec.Template.Labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "bus", Image: "storybus",
				Ports: []corev1.ContainerPort{{Name: "ops", ContainerPort: port, Protocol: corev1.ProtocolTCP}},
			}}},
		}
		if err := k8s.Create(ctx, pod); err != nil {
			if !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
				t.Logf("start pod %s: %v", pod.Name, err)
			}
			continue
		}
		pod.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			},
		}
		if err := k8s.Status().Update(ctx, pod); err != nil && ctx.Err() == nil {
			t.Logf("mark pod %s ready: %v", pod.Name, err)
		}
	}
}

// markStatefulSetsReady watches the StatefulSets of ns and reports every
// desired replica ready, with its pods, until ctx ends.
func markStatefulSetsReady(ctx context.Context, t *testing.T, k8s client.WithWatch, ns string, buses *fakeBuses) {
	for ctx.Err() == nil {
		w, err := k8s.Watch(ctx, &appsv1.StatefulSetList{}, client.InNamespace(ns))
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			sts := ev.Object.(*appsv1.StatefulSet)
			n := int32(1)
			if sts.Spec.Replicas != nil {
				n = *sts.Spec.Replicas
			}
			buses.startPods(ctx, t, k8s, sts, n)
			for {
				if sts.Status.ObservedGeneration == sts.Generation && sts.Status.ReadyReplicas == n {
					break
				}
				sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: n,
					AvailableReplicas: n, CurrentReplicas: n, UpdatedReplicas: n}
				err := k8s.Status().Update(ctx, sts)
				if !apierrors.IsConflict(err) {
					if err != nil && ctx.Err() == nil {
						t.Logf("mark StatefulSet %s ready: %v", sts.Name, err)
					}
					break
				}
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(sts), sts); err != nil {
					break
				}
			}
		}
		w.Stop()
	}
}

// uncachedReads reads how many objects the operator has read past its
// cache so far (storybus_operator_uncached_reads_total, every kind).
func uncachedReads(addr string) (float64, error) {
	families, err := operatorMetrics(addr)
	if err != nil {
		return 0, err
	}
	n := 0.0
	for _, m := range families["storybus_operator_uncached_reads_total"].GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return n, nil
}

// scrape reads the operator's /metrics (or a replica's): the value of
// every metric family made of a single unlabelled series (a counter, a
// gauge or untyped), by name.
func scrape(addr string) (map[string]float64, error) {
	families, err := operatorMetrics(addr)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range families {
		if ms := f.GetMetric(); len(ms) == 1 && len(ms[0].GetLabel()) == 0 {
			m := ms[0]
			switch {
			case m.Counter != nil:
				out[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name] = m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[name] = m.GetUntyped().GetValue()
			}
		}
	}
	return out, nil
}

// operatorMetrics reads the /metrics that the process serving addr
// answers (the operator's, or a replica's).
func operatorMetrics(addr string) (map[string]*dto.MetricFamily, error) {
	return metricFamilies(http.DefaultClient, "http://"+addr+"/metrics")
}

// metricFamilies gets url with hc and parses the metrics it answers (the
// Prometheus text format), by name.
func metricFamilies(hc *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	res, err := hc.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return families, nil
}

// label is the value of m's label name, "" when it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
