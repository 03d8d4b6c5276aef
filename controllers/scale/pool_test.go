//go:build scale

package scale_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/controllers"
	"github.com/storybus/storybus/internal/storetest"
	"github.com/storybus/storybus/internal/testutil"
)

// The pool benchmark (TestPoolAtScale, make scale-pool), built with the
// scale tag only: even its small form takes about a minute (an API
// server, three NATS servers, three replicas and the operator), too long
// for make test. Tenants of ten
// Connections (and a Grant each) placed on one BusPool of three replicas,
// `storybus serve --pool` processes on a three-node nats-server cluster,
// with the operator run as its own process against envtest as in
// TestOperatorAtScale. envtest runs no pods: the test plays the
// StatefulSet controller and the kubelet for the pool's replicas, whose
// pods it reports ready once the replica processes listen.
//
// By default (go test -tags scale -run TestPoolAtScale) it runs a small
// size: 4 Tenants, then 3 onboarded one at a time. STORYBUS_SCALE=full (make scale-pool) runs 1,000 Tenants, then
// 100 onboarded; STORYBUS_POOL_TENANTS=N and STORYBUS_POOL_ONBOARD=N set
// other sizes, STORYBUS_POOL_STREAM_REPLICAS the pool's stream replicas
// (3 by default), STORYBUS_SCALE_WORKERS=N the operator's
// --max-concurrent-reconciles, STORYBUS_SCALE_PROFILE=dir takes the
// operator's CPU profiles while the bulk converges. Run with -v for the figures
// docs/pools.md records; the
// targets (all Ready within 60 s of the last create, onboarding, a
// rotation and a removal in force on every replica within 2 s) are
// reported, not asserted: the machine is shared.

// poolReplicas is the pool's replicas, one process each.
const poolReplicas = 3

// restWindow is how long the benchmark reads the CPU of the pool and its
// cluster at rest, every Tenant placed, before it onboards more.
const restWindow = 10 * time.Second

// poolSizes is the size of the run: Tenants created in bulk, then
// Tenants onboarded one at a time, and the pool's stream replicas.
func poolSizes(t *testing.T) (bulk, onboard, streamReplicas int) {
	bulk, onboard, streamReplicas = 4, 3, 3
	if os.Getenv("STORYBUS_SCALE") == "full" {
		bulk, onboard = 1000, 100
	}
	for _, v := range []struct {
		name string
		into *int
		min  int
	}{{"STORYBUS_POOL_TENANTS", &bulk, 1}, {"STORYBUS_POOL_ONBOARD", &onboard, 2}, {"STORYBUS_POOL_STREAM_REPLICAS", &streamReplicas, 1}} {
		if s := os.Getenv(v.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < v.min {
				t.Fatalf("%s=%q: want a number of at least %d", v.name, s, v.min)
			}
			*v.into = n
		}
	}
	return bulk, onboard, streamReplicas
}

func TestPoolAtScale(t *testing.T) {
	nBulk, nOnboard, streamReplicas := poolSizes(t)
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

	cluster := storetest.StartCluster(t, storetest.NATSServer(t, "../.."), 3)
	st, err := store.Connect(store.Options{URL: cluster.URL(), Replicas: streamReplicas})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)

	dir := t.TempDir()
	binary := filepath.Join(dir, "storybus")
	build := exec.Command("go", append(append([]string{"build", "-o", binary}, testutil.RaceBuildFlags()...), "./cmd/storybus")...)
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	const ns, poolName = "scale", "shared"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// The replicas start first, on the pool's name on its cluster (its
	// namespace and name), as the pool's StatefulSet would run them: a
	// replica listens once it has applied what the pool holds.
	replicas := startPoolReplicas(t, binary, cluster.URL(), ns+"_"+poolName, poolName+"-pool", streamReplicas)

	user, err := env.AddUser(envtest.User{Name: "storybus-operator", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	metricsAddr, probeAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	args := []string{"operator", "--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--metrics-bind-address", metricsAddr, "--metrics-secure=false", "--health-probe-bind-address", probeAddr, "--log-level", "error"}
	// STORYBUS_SCALE_PPROF and STORYBUS_SCALE_PROFILE as in
	// TestOperatorAtScale: the profiles cover the bulk's convergence.
	pprofAddr, profileDir := os.Getenv("STORYBUS_SCALE_PPROF"), os.Getenv("STORYBUS_SCALE_PROFILE")
	if pprofAddr == "" && profileDir != "" {
		pprofAddr = testutil.FreeAddr(t)
	}
	if pprofAddr != "" {
		args = append(args, "--pprof-bind-address", pprofAddr)
	}
	// STORYBUS_SCALE_WORKERS as in TestOperatorAtScale.
	if n := os.Getenv("STORYBUS_SCALE_WORKERS"); n != "" {
		args = append(args, "--max-concurrent-reconciles", n)
	}
	operator := exec.Command(binary, args...)
	operator.Env = testutil.RaceEnv()
	logs := &testutil.SyncBuffer{}
	operator.Stdout, operator.Stderr = logs, logs
	if path := os.Getenv("STORYBUS_SCALE_OPERATOR_LOG"); path != "" {
		// The operator's errors kept for reading after a run that passed.
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		operator.Stdout = io.MultiWriter(logs, f)
		operator.Stderr = operator.Stdout
	}
	if err := operator.Start(); err != nil {
		t.Fatal(err)
	}
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
	checkOperator := func() {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the operator exited (%v) %s after it started; its log:\n%s", err, time.Since(began).Round(time.Second), logs.String())
		default:
		}
	}

	// The pool's StatefulSet is made ready, with its pods, as soon as the
	// operator writes it: the replicas listen already.
	go markStatefulSetsReady(ctx, t, k8s, ns, &fakeBuses{fixed: 8081})
	bp := &v1alpha1.BusPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: poolName}, Spec: v1alpha1.BusPoolSpec{
		Replicas: ptr(int32(poolReplicas)),
		NATS:     v1alpha1.ExternalStorage{URL: cluster.URL(), Replicas: int32(streamReplicas)},
	}}
	if err := k8s.Create(ctx, bp); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the pool's cluster connected and its replicas ready", 2*time.Minute, func() error {
		checkOperator()
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(bp), bp); err != nil {
			return err
		}
		if bp.Status.ReadyReplicas != poolReplicas || !conditionTrue(bp.Status.Conditions, v1alpha1.ConditionClusterReady) {
			return fmt.Errorf("ready replicas %d, conditions %+v", bp.Status.ReadyReplicas, bp.Status.Conditions)
		}
		return nil
	})

	before, err := scrape(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	writesBefore, err := writes(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}

	tl := watchTimeline(ctx, t, k8s, st, ns, ns+"_"+poolName)
	// Readiness from an informer, as in the dedicated run: a List of
	// 21,000 objects every poll loads the API server the run measures.
	followed := followReadiness(ctx, t, cfg, scheme, ns)
	// The bulk: every Tenant with its Connections and Grants, from eight
	// writers.
	start := time.Now()
	names := make([]string, nBulk)
	for i := range names {
		names[i] = fmt.Sprintf("t%04d", i)
	}
	var prof *profiler
	if profileDir != "" {
		prof = startProfiling(t, pprofAddr, profileDir)
	}
	// The operator and the replicas run one binary: their CPU is told
	// apart by pid.
	labels := map[int]string{operator.Process.Pid: "operator"}
	for _, r := range replicas {
		labels[r.cmd.Process.Pid] = "replicas"
	}
	cpuBefore := processCPU(labels)
	parallel(t, 8, names, checkOperator, func(name string) error {
		return createPooledTenant(ctx, k8s, ns, name, poolName, v1alpha1.DeletionPolicyRetain)
	})
	created := time.Since(start)
	lastCreate := time.Now()
	deadline := lastCreate.Add(time.Duration(nBulk)*2*time.Second + 5*time.Minute)
	var ready readiness
	progressed := time.Now()
	for {
		if time.Since(progressed) > 30*time.Second {
			// A long run shows how far it got.
			progressed = time.Now()
			t.Logf("%s after the last create: %d Tenants Ready, %d documents in the pool; load average %s",
				time.Since(lastCreate).Round(time.Second), ready.tenants, tl.placedCount(), loadAverage())
			if len(ready.notReady) > 0 {
				t.Logf("not Ready, for one: %s", ready.notReady[0])
			}
		}
		ready, err = countReady(ctx, followed, ns)
		if err == nil && ready.tenants == nBulk && ready.connections == nBulk*connectionsPerTenant && ready.grants == nBulk*connectionsPerTenant {
			break
		}
		checkOperator()
		if time.Now().After(deadline) {
			t.Fatalf("not all Ready %s after the last create: %d Tenants, %d Connections, %d Grants (%v); not Ready:\n%s", time.Since(lastCreate).Round(time.Second),
				ready.tenants, ready.connections, ready.grants, err, strings.Join(ready.notReady, "\n"))
		}
		time.Sleep(250 * time.Millisecond)
	}
	sinceLast := time.Since(lastCreate)
	cpuUntilReady := cpuSince(cpuBefore, labels)
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
	bulkWrites := writesUntilReady.minus(writesBefore)
	mib := func(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }
	t.Logf("pool at scale: %d Tenants, %d Connections, %d Grants on BusPool %s/%s (%d replicas, stream replicas %d, a %d-node NATS cluster); load average %s",
		nBulk, nBulk*connectionsPerTenant, nBulk*connectionsPerTenant, ns, poolName, poolReplicas, streamReplicas, 3, loadAverage())
	t.Logf("created in %s; all Ready %s after the last create (%s after the first)", created.Round(time.Millisecond), sinceLast.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	t.Logf("CPU of each process from the first create to all Ready: %s", cpuUntilReady)
	t.Logf("operator when all Ready: resident %s (peak seen %s), Go heap in use %s, CPU %.1f s (%.1f s of it for the bulk)",
		mib(m["process_resident_memory_bytes"]), mib(float64(peakResident(operator.Process.Pid))), mib(m["go_memstats_heap_inuse_bytes"]),
		m["process_cpu_seconds_total"], m["process_cpu_seconds_total"]-before["process_cpu_seconds_total"])
	t.Logf("operator writes for the bulk: %v, %.1f per Tenant (with its 10 Connections and Grants)", bulkWrites, bulkWrites.total()/float64(nBulk))
	if w, err := apiserverWrites(cfg); err == nil {
		t.Logf("writes the API server answered until all Ready, by verb and resource (the test's own included): %v", w)
	} else {
		t.Logf("writes the API server answered: unread: %v", err)
	}
	if r, err := reconciles(metricsAddr); err == nil {
		t.Logf("reconciles until all Ready, by controller (count, seconds): %v", r)
	} else {
		t.Logf("reconciles: unread: %v", err)
	}
	for _, r := range replicas {
		t.Logf("replica %s when all Ready: %s", r.name, r.memory())
	}
	lastPut, lastReport := tl.last(names)
	t.Logf("the bulk's last document put into the pool %s after the last create, the last replica's first report of one in force %s after it",
		lastPut.Sub(lastCreate).Round(time.Millisecond), lastReport.Sub(lastCreate).Round(time.Millisecond))

	// Every Tenant answers a publish 202, through the replicas in turn.
	published := time.Now()
	var next atomic.Int64
	parallel(t, 8, names, checkOperator, func(name string) error {
		r := replicas[int(next.Add(1))%len(replicas)]
		id, secret, err := credentials(ctx, k8s, ns, name+"-c00")
		if err != nil {
			return err
		}
		if status, body := r.publishWith(name, id, secret); status != http.StatusAccepted {
			return fmt.Errorf("tenant %s through %s: %d %s", name, r.name, status, body)
		}
		return nil
	})
	t.Logf("every one of the %d Tenants answered a publish 202 through the replicas in turn (a token, then a publish, 8 at once): %s", nBulk, time.Since(published).Round(time.Millisecond))

	// What the pool and its cluster cost at rest, with every Tenant
	// placed: the onboarding below shares the machine with it.
	atRest := processCPU(labels)
	time.Sleep(restWindow)
	t.Logf("at rest with %d Tenants, CPU of each process over %s: %s; load average %s", nBulk, restWindow, cpuSince(atRest, labels), loadAverage())

	// Onboarding: Tenants created one at a time on the ready pool, each
	// timed from its create to its first publish answered 202.
	onboardCPU, onboardBegan := processCPU(labels), time.Now()
	var onboard []time.Duration
	var onboarded []string
	type onboarding struct {
		name                  string
		began, created, creds time.Time
	}
	var timings []onboarding
	for i := range nOnboard {
		name := fmt.Sprintf("n%04d", i)
		policy := v1alpha1.DeletionPolicyRetain
		if i == nOnboard-1 {
			policy = v1alpha1.DeletionPolicyDelete
		}
		began := time.Now()
		if err := createPooledTenant(ctx, k8s, ns, name, poolName, policy); err != nil {
			t.Fatal(err)
		}
		created := time.Now()
		credentialsAt := firstAccepted(ctx, t, k8s, ns, name, replicas, checkOperator)
		onboard = append(onboard, time.Since(began))
		onboarded = append(onboarded, name)
		timings = append(timings, onboarding{name, began, created, credentialsAt})
		checkOperator()
	}
	t.Logf("onboarding took %s; CPU of each process meanwhile: %s", time.Since(onboardBegan).Round(time.Millisecond), cpuSince(onboardCPU, labels))
	p50, p99, worst := quantiles(onboard)
	t.Logf("onboarding %d Tenants one at a time on the ready pool, create to first publish 202: p50 %s, p99 %s, max %s; load average %s",
		nOnboard, p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond), loadAverage())
	// The same, from the last of each Tenant's creates: the API server's
	// answers to the test's own creates (the Tenant, its Connections and
	// their Grants) left out.
	var afterCreated []time.Duration
	for i, o := range timings {
		afterCreated = append(afterCreated, onboard[i]-o.created.Sub(o.began))
	}
	c50, c99, cWorst := quantiles(afterCreated)
	t.Logf("  from the last of its %d creates to its first publish 202: p50 %s, p99 %s, max %s", 1+2*connectionsPerTenant,
		c50.Round(time.Millisecond), c99.Round(time.Millisecond), cWorst.Round(time.Millisecond))
	// The last replica's report may come after the first 202.
	testutil.EventuallyTrue(t, "every replica's report of the onboarded Tenants", time.Minute, func() bool {
		return tl.reported(onboarded) == len(onboarded)
	})
	stages := map[string][]time.Duration{}
	for _, o := range timings {
		for stage, at := range tl.stages(o.name, o.created, o.creds) {
			stages[stage] = append(stages[stage], at.Sub(o.began))
		}
	}
	for _, stage := range timelineStages {
		if ds := stages[stage]; len(ds) > 0 {
			p50, p99, worst := quantiles(ds)
			t.Logf("  from the create to %s (%d of %d seen): p50 %s, p99 %s, max %s", stage, len(ds), nOnboard,
				p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond))
		}
	}

	rotated := rotateOnEveryReplica(ctx, t, k8s, ns, onboarded[0]+"-c00", replicas, checkOperator)
	t.Logf("one Connection's secret rotated: the new secret accepted and the old refused on all %d replicas %s after the rotation was asked; load average %s",
		len(replicas), rotated.Round(time.Millisecond), loadAverage())

	gone := onboarded[len(onboarded)-1]
	removed, finalized := deleteFromEveryReplica(ctx, t, k8s, st, ns, gone, replicas, checkOperator)
	t.Logf("one Tenant deleted: answered as an unknown workspace by all %d replicas %s after the delete; its stream deleted (deletionPolicy delete) and the Tenant gone %s after it; load average %s",
		len(replicas), removed.Round(time.Millisecond), finalized.Round(time.Millisecond), loadAverage())

	final, err := scrape(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("operator at the end: resident %s (peak seen %s), Go heap in use %s, CPU %.1f s",
		mib(final["process_resident_memory_bytes"]), mib(float64(peakResident(operator.Process.Pid))), mib(final["go_memstats_heap_inuse_bytes"]), final["process_cpu_seconds_total"])
	for _, r := range replicas {
		t.Logf("replica %s at the end: %s", r.name, r.memory())
	}
	target := func(name string, ok bool, got string) {
		verdict := "met"
		if !ok {
			verdict = "NOT met"
		}
		t.Logf("target %s: %s (%s)", name, verdict, got)
	}
	target("all Ready <= 60 s after the last create", sinceLast <= time.Minute, sinceLast.Round(time.Second).String())
	target("onboarding p99 <= 2 s", p99 <= 2*time.Second, p99.Round(time.Millisecond).String())
	target("a rotation in force on every replica <= 2 s", rotated <= 2*time.Second, rotated.Round(time.Millisecond).String())
	target("a deleted Tenant unknown on every replica <= 2 s", removed <= 2*time.Second, removed.Round(time.Millisecond).String())
}

func ptr[T any](v T) *T { return &v }

// conditionTrue reports whether condition typ is True.
func conditionTrue(cs []metav1.Condition, typ string) bool {
	for _, c := range cs {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// quantiles returns the median, the 99th percentile (nearest rank) and
// the largest of ds.
func quantiles(ds []time.Duration) (p50, p99, worst time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.5), rank(0.99), s[len(s)-1]
}

// parallel runs do for every name from writers goroutines, and fails the
// test with the first error. checkOperator is called between names.
func parallel(t *testing.T, writers int, names []string, checkOperator func(), do func(string) error) {
	t.Helper()
	jobs := make(chan string)
	var (
		mu     sync.Mutex
		errs   []error
		failed int
	)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for name := range jobs {
				if err := do(name); err != nil {
					mu.Lock()
					failed++
					if len(errs) < 5 {
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	closeJobs := sync.OnceFunc(func() { close(jobs) })
	defer closeJobs()
	for i, name := range names {
		jobs <- name
		if i%10 == 9 {
			checkOperator()
		}
	}
	closeJobs()
	wg.Wait()
	if failed > 0 {
		t.Fatalf("%d of %d failed, among them: %v", failed, len(names), errors.Join(errs...))
	}
}

// createPooledTenant creates Tenant name on the pool, with
// connectionsPerTenant Connections and one Grant per Connection.
func createPooledTenant(ctx context.Context, k8s client.Client, ns, name, pool string, policy v1alpha1.DeletionPolicy) error {
	objs := []client.Object{&v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.TenantSpec{Pool: &v1alpha1.PoolReference{Name: pool}, DeletionPolicy: policy}}}
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

// credentials reads Connection conn's client id and secret from its
// Secret, from the API server.
func credentials(ctx context.Context, k8s client.Client, ns, conn string) (string, string, error) {
	sec := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: conn + "-credentials"}, sec); err != nil {
		return "", "", err
	}
	id, secret := string(sec.Data[v1alpha1.CredentialsClientIDKey]), string(sec.Data[v1alpha1.CredentialsClientSecretKey])
	if id == "" || secret == "" {
		return "", "", fmt.Errorf("secret %s-credentials has no client id or secret yet", conn)
	}
	return id, secret, nil
}

// firstAccepted polls Tenant name's first Connection through the replicas
// in turn, a token then a publish, until a publish is answered 202. It
// returns when the Connection's credentials were first read.
func firstAccepted(ctx context.Context, t *testing.T, k8s client.Client, ns, name string, replicas []*replicaProcess, checkOperator func()) (credentialsAt time.Time) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	last := "no attempt"
	for i := 0; ; i++ {
		id, secret, err := credentials(ctx, k8s, ns, name+"-c00")
		if err == nil {
			if credentialsAt.IsZero() {
				credentialsAt = time.Now()
			}
			r := replicas[i%len(replicas)]
			status, body := r.publishWith(name, id, secret)
			if status == http.StatusAccepted {
				return credentialsAt
			}
			last = fmt.Sprintf("%s: %d %s", r.name, status, body)
		} else {
			last = err.Error()
		}
		checkOperator()
		if time.Now().After(deadline) {
			t.Fatalf("Tenant %s answered no publish 202 within 2m; last: %s", name, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rotateOnEveryReplica rotates Connection conn's secret and returns how
// long after the rotation was asked every replica accepted the new secret
// and refused the old one.
func rotateOnEveryReplica(ctx context.Context, t *testing.T, k8s client.Client, ns, conn string, replicas []*replicaProcess, checkOperator func()) time.Duration {
	t.Helper()
	tenant, _, _ := strings.Cut(conn, "-")
	id, old, err := credentials(ctx, k8s, ns, conn)
	if err != nil {
		t.Fatal(err)
	}
	c := &v1alpha1.Connection{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: conn}, c); err != nil {
		t.Fatal(err)
	}
	c.Spec.Credentials.Rotate++
	start := time.Now()
	if err := k8s.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	// done[i]: replica i accepts the new secret and refuses the old.
	done := make([]bool, len(replicas))
	last := "the Secret not rotated yet"
	for {
		_, secret, err := credentials(ctx, k8s, ns, conn)
		if err == nil && secret != old {
			all := true
			for i, r := range replicas {
				if done[i] {
					continue
				}
				_, newStatus := r.token(tenant, id, secret)
				_, oldStatus := r.token(tenant, id, old)
				done[i] = newStatus == http.StatusOK && oldStatus == http.StatusUnauthorized
				all = all && done[i]
				if !done[i] {
					last = fmt.Sprintf("%s: the new secret %d, the old %d", r.name, newStatus, oldStatus)
				}
			}
			if all {
				return time.Since(start)
			}
		}
		checkOperator()
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("the rotation of %s is not in force on every replica after 2m: %s", conn, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deleteFromEveryReplica deletes Tenant name (deletionPolicy delete) and
// returns how long after the delete every replica answered it as an
// unknown workspace, and how long until its stream and the Tenant were
// gone.
func deleteFromEveryReplica(ctx context.Context, t *testing.T, k8s client.Client, st *store.Store, ns, name string, replicas []*replicaProcess, checkOperator func()) (removed, finalized time.Duration) {
	t.Helper()
	id, secret, err := credentials(ctx, k8s, ns, name+"-c00")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.JS.Stream(ctx, store.StreamName(name)); err != nil {
		t.Fatalf("the workspace's stream before the deletion: %v", err)
	}
	start := time.Now()
	if err := k8s.Delete(ctx, &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	unknown := make([]bool, len(replicas))
	for {
		all := true
		for i, r := range replicas {
			if !unknown[i] {
				status, body := r.tokenAnswer(name, id, secret)
				unknown[i] = status == http.StatusForbidden && strings.Contains(body, bus.MissingAuthenticationToken)
			}
			all = all && unknown[i]
		}
		if all {
			removed = time.Since(start)
			break
		}
		checkOperator()
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("Tenant %s is still served after 2m: unknown on replicas %v", name, unknown)
		}
		time.Sleep(20 * time.Millisecond)
	}
	testutil.Eventually(t, "the deleted Tenant and its stream gone", 2*time.Minute, func() error {
		checkOperator()
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.Tenant{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the Tenant: %v", err)
		}
		if _, err := st.JS.Stream(ctx, store.StreamName(name)); !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("the stream: %v", err)
		}
		return nil
	})
	return removed, time.Since(start)
}

// replicaProcess is one `storybus serve --pool` process.
type replicaProcess struct {
	name     string
	api, ops string
	cmd      *exec.Cmd
	logs     *testutil.SyncBuffer
	http     *http.Client
}

// startPoolReplicas starts poolReplicas processes serving pool pool of
// the cluster at natsURL, named <prefix>-0, <prefix>-1 … as the pods of
// the pool's StatefulSet are, and returns once each listens. Their token
// endpoints count no failed attempts: the benchmark asks with secrets not
// yet, or no longer, in force while it polls.
func startPoolReplicas(t *testing.T, binary, natsURL, pool, prefix string, streamReplicas int) []*replicaProcess {
	t.Helper()
	var out []*replicaProcess
	for i := range poolReplicas {
		r := &replicaProcess{name: fmt.Sprintf("%s-%d", prefix, i), api: testutil.FreeAddr(t), ops: testutil.FreeAddr(t),
			logs: &testutil.SyncBuffer{}, http: &http.Client{Timeout: 10 * time.Second}}
		r.cmd = exec.Command(binary, "serve", "--nats-url", natsURL, "--replicas", strconv.Itoa(streamReplicas),
			"--pool", pool, "--pool-replica", r.name, "--listen", r.api, "--ops-listen", r.ops,
			"--drain-period", "0", "--access-log=false", "--log-level", "warn",
			"--token-failures-per-client-address", "0", "--token-failures-per-client", "0", "--token-failures-per-address", "0")
		r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = r.cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = r.cmd.Process.Kill()
			<-done
			if t.Failed() {
				t.Logf("replica %s's logs:\n%s", r.name, r.logs.String())
			}
		})
		out = append(out, r)
	}
	for _, r := range out {
		testutil.Eventually(t, "replica "+r.name+" listens", 2*time.Minute, func() error {
			if r.cmd.ProcessState != nil {
				t.Fatalf("replica %s exited: %s", r.name, r.logs.String())
			}
			res, err := r.http.Get("http://" + r.ops + "/healthz")
			if err != nil {
				return err
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				return fmt.Errorf("/healthz %d", res.StatusCode)
			}
			return nil
		})
	}
	return out
}

// memory is the replica's resident memory and Go heap, from its metrics.
func (r *replicaProcess) memory() string {
	m, err := scrape(r.ops)
	if err != nil {
		return "metrics unread: " + err.Error()
	}
	return fmt.Sprintf("resident %.0f MiB, Go heap in use %.0f MiB, CPU %.1f s",
		m["process_resident_memory_bytes"]/(1<<20), m["go_memstats_heap_inuse_bytes"]/(1<<20), m["process_cpu_seconds_total"])
}

// tokenAnswer asks the replica for a token of workspace ws and returns
// the answer's status and body.
func (r *replicaProcess) tokenAnswer(ws, clientID, secret string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.api+"/v1/tenants/"+ws+"/tokens", strings.NewReader("grant_type=client_credentials"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	res, err := r.http.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// token asks the replica for a token of workspace ws; "" with the status
// when it issues none.
func (r *replicaProcess) token(ws, clientID, secret string) (string, int) {
	status, body := r.tokenAnswer(ws, clientID, secret)
	if status != http.StatusOK {
		return "", status
	}
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.Unmarshal([]byte(body), &tr)
	return tr.AccessToken, status
}

// publishWith gets a token with the credentials, then publishes a fresh
// snapshot as the connection; the status and body are the token
// endpoint's when it issues none.
func (r *replicaProcess) publishWith(ws, clientID, secret string) (int, string) {
	status, body := r.tokenAnswer(ws, clientID, secret)
	if status != http.StatusOK {
		return status, body
	}
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal([]byte(body), &tr); err != nil || tr.AccessToken == "" {
		return status, "no access_token in " + body
	}
	msg := fmt.Sprintf(`{"som_version":"1.0","message_id":%q,"message_type":"story.context","system_id":%q,"timestamp":"2026-12-01T09:00:00Z","payload":{"story_id":%q,"sequence_number":1,"state":"draft","headline":"Pooled"}}`,
		uuid.NewString(), clientID, "story-"+uuid.NewString()[:8])
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.api+"/v1/tenants/"+ws+"/messages", bytes.NewReader([]byte(msg)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tr.AccessToken)
	res, err := r.http.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// timeline records when each workspace's compiled configuration, its
// document in the pool and each replica's report of it were first seen,
// to tell where an onboarding's time goes.
type timeline struct {
	mu sync.Mutex
	// compiled: the Tenant's ConfigMap first seen; placed: its document
	// first put into the pool; inForce: each replica's first report of a
	// document in force.
	compiled, placed map[string]time.Time
	inForce          map[string]map[string]time.Time
}

// The stages of an onboarding, in order.
var timelineStages = []string{
	"the Tenant and its 20 objects created",
	"the first Connection's credentials read",
	"its configuration compiled (ConfigMap)",
	"its document put into the pool",
	"in force on the first replica",
	"in force on every replica",
}

// watchTimeline watches the ConfigMaps of ns and pool's two buckets until
// ctx ends.
func watchTimeline(ctx context.Context, t *testing.T, k8s client.WithWatch, st *store.Store, ns, poolName string) *timeline {
	t.Helper()
	tl := &timeline{compiled: map[string]time.Time{}, placed: map[string]time.Time{}, inForce: map[string]map[string]time.Time{}}
	first := func(m map[string]time.Time, ws string) {
		tl.mu.Lock()
		if _, ok := m[ws]; !ok {
			m[ws] = time.Now()
		}
		tl.mu.Unlock()
	}
	w, err := k8s.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && cm.Data[controllers.ConfigFile] != "" {
				if doc, err := config.Parse([]byte(cm.Data[controllers.ConfigFile])); err == nil {
					first(tl.compiled, doc.ID)
				}
			}
		}
	}()
	p, err := pool.Open(ctx, st.JS, poolName, 1)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := p.Documents.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	statuses, err := p.Statuses.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer func() { _ = docs.Stop(); _ = statuses.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e := <-docs.Updates():
				if e != nil && e.Operation() == jetstream.KeyValuePut {
					first(tl.placed, e.Key())
				}
			case e := <-statuses.Updates():
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				var rs pool.Status
				ws, replica, _ := strings.Cut(e.Key(), ".")
				if json.Unmarshal(e.Value(), &rs) != nil || rs.Hash == "" {
					continue
				}
				tl.mu.Lock()
				if tl.inForce[ws] == nil {
					tl.inForce[ws] = map[string]time.Time{}
				}
				if _, ok := tl.inForce[ws][replica]; !ok {
					tl.inForce[ws][replica] = time.Now()
				}
				tl.mu.Unlock()
			}
		}
	}()
	return tl
}

// stages returns when workspace ws reached each stage of timelineStages
// that was seen; created and credentials are the test's own.
func (tl *timeline) stages(ws string, created, credentials time.Time) map[string]time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := map[string]time.Time{timelineStages[0]: created, timelineStages[1]: credentials}
	if at, ok := tl.compiled[ws]; ok {
		out[timelineStages[2]] = at
	}
	if at, ok := tl.placed[ws]; ok {
		out[timelineStages[3]] = at
	}
	var first, last time.Time
	for _, at := range tl.inForce[ws] {
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	if !first.IsZero() {
		out[timelineStages[4]] = first
	}
	if len(tl.inForce[ws]) == poolReplicas {
		out[timelineStages[5]] = last
	}
	return out
}

// reported counts the workspaces of wss that every replica reported in
// force.
func (tl *timeline) reported(wss []string) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := 0
	for _, ws := range wss {
		if len(tl.inForce[ws]) == poolReplicas {
			n++
		}
	}
	return n
}

// last returns when the last of wss's documents was first put into the
// pool, and when the last replica first reported one of them in force.
func (tl *timeline) last(wss []string) (put, report time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, ws := range wss {
		if at := tl.placed[ws]; at.After(put) {
			put = at
		}
		for _, at := range tl.inForce[ws] {
			if at.After(report) {
				report = at
			}
		}
	}
	return put, report
}

// placedCount counts the workspaces whose document was put into the pool.
func (tl *timeline) placedCount() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.placed)
}
