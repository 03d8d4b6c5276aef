package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
)

// DensityOptions configure RunDensity: how many workspaces a pool replica
// serves, and how it is started.
type DensityOptions struct {
	// Workspaces are the levels measured, each on a store of its own.
	Workspaces []int
	// Connections of every workspace, each with a grant and limits.
	Connections int
	// Binary is the storybus binary run as the replica; empty runs this
	// process's own executable.
	Binary string
	// DataDir is where the stores' temporary directories are made; empty
	// is the system's temporary directory.
	DataDir string
	// Cluster, when above 0, stores each level on that many nats-server
	// processes of NATSServer clustered with JetStream on loopback, every
	// stream and bucket with min(Cluster, 3) replicas, as a pool's
	// cluster does; 0 embeds one JetStream node in the benchmark.
	Cluster int
	// NATSServer is the nats-server binary Cluster starts: a path, or a
	// name looked up in PATH.
	NATSServer string
	// Settle is how long the replica idles, after a garbage collection,
	// before its memory is read.
	Settle time.Duration
	// Timeout bounds each start of the replica, to all its workspaces in
	// force and serving.
	Timeout time.Duration
	// ProfileDir, when set, receives the heap profile of each level's
	// idle replica (heap-<workspaces>.pprof).
	ProfileDir string
	// Progress, when set, receives a line per step.
	Progress io.Writer
	// Logger receives the benchmark's warnings.
	Logger *slog.Logger
}

// DefaultDensityOptions are `storybus bench density`'s defaults.
func DefaultDensityOptions() DensityOptions {
	return DensityOptions{Workspaces: []int{100, 500, 1000}, Connections: 10, Settle: 5 * time.Second, Timeout: 10 * time.Minute,
		NATSServer: "nats-server"}
}

// Validate reports options RunDensity cannot run with.
func (o DensityOptions) Validate() error {
	var errs []error
	if len(o.Workspaces) == 0 {
		errs = append(errs, errors.New("--workspaces needs at least one level"))
	}
	for _, n := range o.Workspaces {
		if n < 1 {
			errs = append(errs, fmt.Errorf("--workspaces %d: a level serves at least one workspace", n))
		}
	}
	if o.Connections < 1 {
		errs = append(errs, errors.New("--connections must be at least 1"))
	}
	if o.Cluster < 0 || o.Cluster > 0 && o.NATSServer == "" {
		errs = append(errs, errors.New("--cluster must not be negative, and needs --nats-server"))
	}
	if o.Settle < 0 || o.Timeout <= 0 {
		errs = append(errs, errors.New("--settle must not be negative, --timeout must be positive"))
	}
	return errors.Join(errs...)
}

// DensityReport is what RunDensity measured.
type DensityReport struct {
	Machine     Machine `json:"machine"`
	Connections int     `json:"connections"`
	// Cluster is the nats-server processes of each level's store; 0 is
	// one JetStream node embedded in the benchmark.
	Cluster int `json:"cluster,omitempty"`
	// Replicas of every stream and bucket.
	Replicas int `json:"replicas"`
	// Base is the replica serving an empty pool.
	Base Memory `json:"base"`
	// Levels are the workspace levels, in the order run.
	Levels []DensityLevel `json:"levels"`
}

// DensityLevel is one level: the replica started twice over the same
// workspaces, first creating their streams and buckets, then again over
// the existing ones (a restart, as when a pool rolls), and its memory
// idle after the second start.
type DensityLevel struct {
	Workspaces int `json:"workspaces"`
	// First is the start that created every workspace's streams.
	First Start `json:"first_start"`
	// Restart is the start over the streams the first one left.
	Restart Start `json:"restart"`
	// Idle is the replica's memory with every workspace in force, idle.
	Idle Memory `json:"idle"`
	// MarginalMiB is Idle's resident memory above Base's, per workspace.
	MarginalMiB float64 `json:"marginal_mib_per_workspace"`
	// Load is the load average when the level ended.
	Load string `json:"load_average,omitempty"`
}

// Start is one start of the replica, timed from the process's start.
type Start struct {
	// InForce is when the last workspace was reported in force in the
	// status bucket.
	InForce time.Duration `json:"in_force_ns"`
	// Serving is when a publish to the last workspace put into the pool
	// was first answered 202.
	Serving time.Duration `json:"serving_ns"`
}

// Memory is the replica's memory, read from its /metrics.
type Memory struct {
	// RSSMiB is its resident set.
	RSSMiB float64 `json:"rss_mib"`
	// HeapMiB is the Go heap in use, after a garbage collection.
	HeapMiB float64 `json:"heap_in_use_mib"`
	// Goroutines is the number of goroutines.
	Goroutines int `json:"goroutines"`
}

// densityPool is the name of the pool the benchmark fills.
const densityPool = "density"

// RunDensity measures how a pool replica's memory and start time grow
// with its workspaces. For each level it starts a NATS JetStream server
// of its own (embedded in this process, one node, or o.Cluster
// nats-server processes), puts that many
// workspace documents into a pool, and starts `storybus serve --pool` as
// a process of its own, so that what is measured is the replica's alone.
func RunDensity(ctx context.Context, o DensityOptions) (*DensityReport, error) {
	if o.Binary == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.Binary = self
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	rep := &DensityReport{Machine: currentMachine(), Connections: o.Connections, Cluster: o.Cluster, Replicas: o.replicas()}
	for i, n := range o.Workspaces {
		lvl, base, err := o.level(ctx, n, i == 0)
		if i == 0 {
			rep.Base = base
		}
		if err != nil {
			return rep, fmt.Errorf("%d workspaces: %w", n, err)
		}
		lvl.MarginalMiB = (lvl.Idle.RSSMiB - rep.Base.RSSMiB) / float64(n)
		lvl.Load = loadAverage()
		rep.Levels = append(rep.Levels, lvl)
	}
	rep.Machine.LoadEnd = loadAverage()
	return rep, nil
}

func (o DensityOptions) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// level measures n workspaces on a store of their own; withBase measures
// the replica of the empty pool first.
func (o DensityOptions) level(ctx context.Context, n int, withBase bool) (lvl DensityLevel, base Memory, err error) {
	lvl.Workspaces = n
	dir, err := os.MkdirTemp(o.DataDir, "storybus-density-")
	if err != nil {
		return lvl, base, err
	}
	defer os.RemoveAll(dir)
	natsURL, stopStore, err := o.startStore(ctx, dir)
	if err != nil {
		return lvl, base, err
	}
	defer stopStore()
	st, err := store.Connect(store.Options{URL: natsURL, Replicas: o.replicas(), Name: "storybus-bench"})
	if err != nil {
		return lvl, base, err
	}
	defer st.Close()
	p, err := pool.Open(ctx, st.JS, densityPool, o.replicas())
	if err != nil {
		return lvl, base, err
	}
	r := &replica{o: o, natsURL: natsURL, statuses: p.Statuses}

	if withBase {
		o.progress("density: the replica of an empty pool")
		if base, err = r.idle(ctx, 0, "", nil); err != nil {
			return lvl, base, fmt.Errorf("empty pool: %w", err)
		}
		o.progress("density: empty pool: %.1f MiB resident, %.1f MiB heap", base.RSSMiB, base.HeapMiB)
	}

	o.progress("density: putting %d workspaces of %d connections into the pool", n, o.Connections)
	ws, err := o.putWorkspaces(ctx, p, n)
	if err != nil {
		return lvl, base, err
	}
	o.progress("density: %d workspaces, first start (their streams and buckets created)", n)
	if lvl.First, err = r.start(ctx, ws); err != nil {
		return lvl, base, fmt.Errorf("first start: %w", err)
	}
	o.progress("density: %d workspaces, first start: in force %s, serving %s", n, roundMs(lvl.First.InForce), roundMs(lvl.First.Serving))
	if err := r.stop(); err != nil {
		return lvl, base, err
	}
	o.progress("density: %d workspaces, restart", n)
	profile := ""
	if o.ProfileDir != "" {
		profile = filepath.Join(o.ProfileDir, "heap-"+strconv.Itoa(n)+".pprof")
	}
	lvl.Idle, err = r.idle(ctx, n, profile, func() error {
		lvl.Restart, err = r.start(ctx, ws)
		return err
	})
	if err != nil {
		return lvl, base, fmt.Errorf("restart: %w", err)
	}
	o.progress("density: %d workspaces, restart: in force %s, serving %s; idle %.1f MiB resident, %.1f MiB heap, %d goroutines",
		n, roundMs(lvl.Restart.InForce), roundMs(lvl.Restart.Serving), lvl.Idle.RSSMiB, lvl.Idle.HeapMiB, lvl.Idle.Goroutines)
	return lvl, base, nil
}

// replicas is how many copies the level's store keeps of each stream and
// bucket.
func (o DensityOptions) replicas() int {
	if o.Cluster > 0 {
		return min(o.Cluster, 3)
	}
	return 1
}

// startStore starts a level's store under dir: one embedded JetStream
// node, or o.Cluster nats-server processes. It returns the URL the
// replica connects to and how to stop the store.
func (o DensityOptions) startStore(ctx context.Context, dir string) (string, func(), error) {
	if o.Cluster > 0 {
		c, err := startCluster(ctx, Options{Cluster: o.Cluster, NATSServer: o.NATSServer, Sync: SyncInterval, DataDir: dir})
		if err != nil {
			return "", nil, err
		}
		return c.url(), c.stop, nil
	}
	addr, err := freeAddr()
	if err != nil {
		return "", nil, err
	}
	ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: dir, Listen: addr})
	if err != nil {
		return "", nil, err
	}
	return ns.ClientURL(), func() { ns.Shutdown(); ns.WaitForShutdown() }, nil
}

func roundMs(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// densityWorkspace is one workspace the benchmark put into the pool, and
// how to publish to it.
type densityWorkspace struct {
	cfg    *config.Workspace
	hash   string
	secret string
}

// putWorkspaces puts n workspaces into the pool: each has o.Connections
// connections, each granted its own system id and the story message
// types, with its own secret and limits, as an operator compiles a
// Tenant's Connections and Grants.
func (o DensityOptions) putWorkspaces(ctx context.Context, p *pool.Pool, n int) ([]densityWorkspace, error) {
	out := make([]densityWorkspace, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = o.putWorkspace(ctx, p, i, &out[i])
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func (o DensityOptions) putWorkspace(ctx context.Context, p *pool.Pool, i int, w *densityWorkspace) error {
	w.secret = randomSecret()
	cfg := &config.Workspace{ID: fmt.Sprintf("density-%04d", i), SigningKey: randomSecret(),
		Limits: config.Limits{RatePerSecond: 100, Burst: 200, DailyQuota: 1_000_000}}
	for c := range o.Connections {
		secret := randomSecret()
		if c == 0 {
			secret = w.secret
		}
		name := fmt.Sprintf("system-%d", c)
		cfg.Connections = append(cfg.Connections, config.Connection{
			Name: name, ClientID: name, SecretHash: config.HashSecret(secret),
			Limits: &config.Limits{RatePerSecond: 50, Burst: 100, DailyQuota: 500_000},
			Grant: config.Grant{
				Publish: config.PublishGrant{SystemIDs: []string{name}, MessageTypes: []string{som.TypeStoryContext, som.TypeStoryEvent, som.TypeAssetReference}},
				Consume: config.ConsumeGrant{Families: []string{"*"}},
			},
		})
	}
	cfg.Default()
	hash, err := p.Put(ctx, cfg)
	if err != nil {
		return err
	}
	w.cfg, w.hash = cfg, hash
	return nil
}

// replica runs `storybus serve --pool` as a process of its own.
type replica struct {
	o        DensityOptions
	natsURL  string
	statuses jetstream.KeyValue

	cmd       *exec.Cmd
	done      chan struct{}
	logs      *tailBuffer
	api, ops  string
	startedAt time.Time
}

// replicaName is the replica's name in the status bucket.
const replicaName = "density-0"

func (r *replica) launch() error {
	api, err := freeAddr()
	if err != nil {
		return err
	}
	ops, err := freeAddr()
	if err != nil {
		return err
	}
	r.api, r.ops = api, ops
	r.logs = &tailBuffer{}
	r.cmd = exec.Command(r.o.Binary, "serve", "--nats-url", r.natsURL, "--replicas", strconv.Itoa(r.o.replicas()),
		"--pool", densityPool, "--pool-replica", replicaName,
		"--listen", api, "--ops-listen", ops, "--drain-period", "0s", "--access-log=false", "--log-level", "warn", "--profiling")
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	r.startedAt = time.Now()
	if err := r.cmd.Start(); err != nil {
		return err
	}
	r.done = make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	return nil
}

// stop ends the replica with SIGTERM, as Kubernetes does.
func (r *replica) stop() error {
	if r.cmd == nil {
		return nil
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
		return fmt.Errorf("the replica did not stop within 30s of SIGTERM")
	}
	r.cmd = nil
	return nil
}

// exited is the error of a replica that ended before it was stopped.
func (r *replica) exited() error {
	return fmt.Errorf("the replica exited: %v\n%s", r.cmd.ProcessState, r.logs.String())
}

// start launches the replica and waits for every workspace of ws to be
// in force (reported in the status bucket after the launch) and for the
// last one to answer a publish 202.
func (r *replica) start(ctx context.Context, ws []densityWorkspace) (Start, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	want := make(map[string]string, len(ws))
	for _, w := range ws {
		want[w.cfg.ID+"."+replicaName] = w.hash
	}
	// Only what this start reports counts.
	watch, err := r.statuses.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return Start{}, err
	}
	defer func() { _ = watch.Stop() }()
	if err := r.launch(); err != nil {
		return Start{}, err
	}
	var s Start
	inForce := map[string]bool{}
	refused := ""
	for len(inForce) < len(want) {
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("%d of %d workspaces in force when the start timed out (last refusal: %s)\n%s", len(inForce), len(want), refused, r.logs.String())
		case <-r.done:
			return s, r.exited()
		case e := <-watch.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			hash, ok := want[e.Key()]
			if !ok {
				continue
			}
			var st pool.Status
			if json.Unmarshal(e.Value(), &st) != nil {
				continue
			}
			if st.Hash == hash && st.Error == "" {
				inForce[e.Key()] = true
			} else if st.Error != "" {
				refused = e.Key() + ": " + st.Error
			}
		}
	}
	s.InForce = time.Since(r.startedAt)
	last := ws[len(ws)-1]
	if err := r.publish(ctx, last); err != nil {
		return s, err
	}
	s.Serving = time.Since(r.startedAt)
	return s, nil
}

// publish gets a token for w's first connection and publishes a snapshot
// with it, trying again until the replica answers 202.
func (r *replica) publish(ctx context.Context, w densityWorkspace) error {
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	conn := w.cfg.Connections[0].Name
	base := "http://" + r.api + "/v1/tenants/" + w.cfg.ID
	var last error
	for {
		err := r.publishOnce(ctx, hc, base, conn, w.secret)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no publish to %s answered 202: %w", w.cfg.ID, last)
		case <-r.done:
			return r.exited()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *replica) publishOnce(ctx context.Context, hc *http.Client, base, conn, secret string) error {
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {conn}, "client_secret": {secret}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tokens", strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := do(hc, req, http.StatusOK, &tok); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	body := Snapshot(uuid.NewString(), conn, "density-"+uuid.NewString(), 1, time.Now())
	req, err = http.NewRequestWithContext(ctx, http.MethodPost, base+"/messages", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	return do(hc, req, http.StatusAccepted, nil)
}

// do sends req and wants status, decoding the answer into out when set.
func do(hc *http.Client, req *http.Request, status int, out any) error {
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if res.StatusCode != status {
		return fmt.Errorf("HTTP %d: %s", res.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// idle starts the replica (with start, or bare for an empty pool), waits
// until it serves n workspaces, collects its garbage, lets it idle for
// Settle, and reads its memory; then stops it. profile, when set,
// receives its heap profile.
func (r *replica) idle(ctx context.Context, n int, profile string, start func() error) (Memory, error) {
	if start == nil {
		start = r.launch
	}
	if err := start(); err != nil {
		_ = r.stop()
		return Memory{}, err
	}
	defer func() { _ = r.stop() }()
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	ops := "http://" + r.ops
	// The operations port listens once the pool's workspaces are applied.
	deadline := time.Now().Add(r.o.Timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ops+"/healthz", nil)
		err := do(hc, req, http.StatusOK, nil)
		if err == nil {
			break
		}
		select {
		case <-r.done:
			return Memory{}, r.exited()
		case <-ctx.Done():
			return Memory{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return Memory{}, fmt.Errorf("the replica's operations port did not answer: %w", err)
		}
	}
	// A collection first (the heap profile's gc=1), so that what the
	// start made and dropped is not counted.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ops+"/debug/pprof/heap?gc=1", nil)
	res, err := hc.Do(req)
	if err != nil {
		return Memory{}, fmt.Errorf("garbage collection: %w", err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	select {
	case <-ctx.Done():
		return Memory{}, ctx.Err()
	case <-time.After(r.o.Settle):
	}
	if profile != "" {
		if err := r.saveProfile(ctx, hc, ops+"/debug/pprof/heap?gc=1", profile); err != nil {
			return Memory{}, err
		}
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, ops+"/metrics", nil)
	res, err = hc.Do(req)
	if err != nil {
		return Memory{}, err
	}
	defer res.Body.Close()
	m, err := parseMemory(res.Body)
	if err != nil {
		return m, err
	}
	var cfgz struct {
		Workspaces []json.RawMessage `json:"workspaces"`
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, ops+"/configz", nil)
	if err := do(hc, req, http.StatusOK, &cfgz); err != nil {
		return m, err
	}
	if len(cfgz.Workspaces) != n {
		return m, fmt.Errorf("the replica serves %d workspaces, not %d", len(cfgz.Workspaces), n)
	}
	return m, nil
}

func (r *replica) saveProfile(ctx context.Context, hc *http.Client, from, to string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, from, nil)
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// parseMemory reads the resident set, the heap in use and the goroutines
// from the Prometheus text of /metrics.
func parseMemory(r io.Reader) (Memory, error) {
	var m Memory
	found := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			m.RSSMiB, found = v/(1<<20), found+1
		case "go_memstats_heap_inuse_bytes":
			m.HeapMiB, found = v/(1<<20), found+1
		case "go_goroutines":
			m.Goroutines, found = int(v), found+1
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if found != 3 {
		return m, errors.New("the replica's /metrics lacks process_resident_memory_bytes, go_memstats_heap_inuse_bytes or go_goroutines")
	}
	return m, nil
}

// WriteTable prints the report: the empty replica, then a line per level.
func (rep *DensityReport) WriteTable(w io.Writer) error {
	store := "one NATS node embedded in the benchmark"
	if rep.Cluster > 0 {
		store = fmt.Sprintf("%d local nats-server processes, every stream and bucket with %d replicas", rep.Cluster, rep.Replicas)
	}
	fmt.Fprintf(w, "pool replica density: %s, the replica a process of its own; %d connections per workspace\n", store, rep.Connections)
	fmt.Fprintf(w, "machine: %d CPUs, %s; load average %s at the start, %s at the end\n", rep.Machine.CPUs, rep.Machine.GoVersion, rep.Machine.LoadStart, rep.Machine.LoadEnd)
	fmt.Fprintf(w, "empty pool: %.1f MiB resident, %.1f MiB heap, %d goroutines\n\n", rep.Base.RSSMiB, rep.Base.HeapMiB, rep.Base.Goroutines)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workspaces\tfirst start: in force\tserving\trestart: in force\tserving\tidle RSS MiB\theap MiB\tgoroutines\tMiB per workspace\tload average")
	for _, l := range rep.Levels {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%d\t%.3f\t%s\n", l.Workspaces,
			roundMs(l.First.InForce), roundMs(l.First.Serving), roundMs(l.Restart.InForce), roundMs(l.Restart.Serving),
			l.Idle.RSSMiB, l.Idle.HeapMiB, l.Idle.Goroutines, l.MarginalMiB, l.Load)
	}
	return tw.Flush()
}
