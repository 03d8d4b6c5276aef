package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/net/netutil"
	"k8s.io/apimachinery/pkg/api/resource"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/configfile"
	"github.com/storybus/storybus/bus/pool"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/bus/tlsconfig"
	"github.com/storybus/storybus/internal/buildinfo"
	"github.com/storybus/storybus/internal/startpages"
)

// ServeOptions are the flags of `storybus serve`.
type ServeOptions struct {
	Configs        []string
	Listen         string
	OpsListen      string
	DataDir        string
	NATSURL        string
	NATSCreds      string
	NATSListen     string
	Replicas       int
	Sync           string
	SyncInterval   time.Duration
	TopicRetention time.Duration
	LogFormat      string
	LogLevel       string
	// AccessLog writes one log line per request on the publish port.
	AccessLog bool
	// MemoryLimit is the memory the bus may use (its container's limit,
	// which the operator passes as STORYBUS_MEMORY_LIMIT); the Go memory
	// limit is set to nine tenths of it unless GOMEMLIMIT is set.
	MemoryLimit string
	// MaxConnections bounds the publish port's open connections; 0 means
	// no bound.
	MaxConnections int
	// RequestConcurrency is the requestConcurrency of workspaces whose
	// configuration sets none.
	RequestConcurrency int
	// RefusalHold is how long at most an over-share refusal is held.
	RefusalHold time.Duration
	// Pool names the bus pool whose workspaces this bus serves, from the
	// pool's buckets on the --nats-url cluster, as replica PoolReplica.
	Pool, PoolReplica string
	// SharedRecordsMaxBytes bounds each records bucket the pooled
	// workspaces share (bytes or a Kubernetes quantity); empty asks for
	// no bound.
	SharedRecordsMaxBytes string
	// ReleaseStartPages has the bus, once it serves, unmap the pages of
	// its binary only its start touched (package startpages): the serve
	// and dev commands set it, a bus run inside another program does not.
	ReleaseStartPages bool
	// DrainPeriod is how long a stopping bus goes on serving, not ready,
	// before it completes what is in progress and exits.
	DrainPeriod time.Duration
	// TokenAttempts limits failed attempts at the token endpoint.
	TokenAttempts bus.TokenAttempts
	// TLSCertFile and TLSKeyFile, when set, make the publish port serve
	// HTTPS only, with this key pair, reloaded when the files change.
	TLSCertFile string
	TLSKeyFile  string
	// TLSClientCAFile, when set, lets clients present certificates signed
	// by these authorities (mutual TLS).
	TLSClientCAFile string
	// TrustedProxies are the addresses or CIDRs of the proxies whose
	// X-Forwarded-For gives the client's address; parsed by validate.
	TrustedProxies []string
	// Consumers bound the consumer routes' durable consumers.
	Consumers store.ConsumerLimits
	// Profiling serves Go's runtime profiles under /debug/pprof/ on the
	// operations port.
	Profiling bool
	// FaultKill names a publish fault point at which the process kills
	// itself with SIGKILL: the crash drills of the fault tests.
	FaultKill string
	// watch are configuration files reloaded when they change: watch[i]
	// is the file the configuration cfgs[i] of Serve was read from.
	watch []*configfile.File
}

// Sync modes of the embedded JetStream.
const (
	SyncAlways   = "always"
	SyncInterval = "interval"
)

func (o *ServeOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", ":8080", "address of the publish API")
	f.StringVar(&o.OpsListen, "ops-listen", ":8081", "address of /healthz, /readyz, /configz, /metrics and /openapi.yaml")
	f.StringVar(&o.DataDir, "data-dir", "data", "JetStream file storage of the embedded store")
	f.StringVar(&o.NATSURL, "nats-url", "", "URL of an external NATS cluster; empty runs JetStream embedded")
	f.StringVar(&o.NATSCreds, "nats-credentials", "", "NATS credentials file for --nats-url")
	f.StringVar(&o.NATSListen, "nats-listen", "", "also serve NATS clients (consumers) from the embedded store on this address")
	f.IntVar(&o.Replicas, "replicas", 1, "replicas of every stream and bucket: 1 on the embedded server; give 3 with --nats-url on a three-node cluster (the operator does)")
	f.StringVar(&o.Sync, "sync", SyncAlways, "embedded JetStream fsync: always (every message) or interval")
	f.DurationVar(&o.SyncInterval, "sync-interval", 0, "fsync period of what is not fsynced on write: every write with --sync=interval (default 2m), the records bucket with --sync=always (default 10s)")
	f.DurationVar(&o.TopicRetention, "topic-retention", 0, "how long the topic keeps messages; 0 keeps them until the store's limits")
	bindLogFlags(cmd, &o.LogFormat, &o.LogLevel)
	f.IntVar(&o.MaxConnections, "max-connections", DefaultMaxConnections, "open connections the publish port serves at once; more wait to be accepted (0: no bound)")
	f.StringVar(&o.MemoryLimit, "memory-limit", "", "the memory the bus may use, in bytes or as a Kubernetes quantity (1Gi): the Go heap is kept under nine tenths of it unless GOMEMLIMIT is set; empty sets nothing")
	f.DurationVar(&o.RefusalHold, "refusal-hold", bus.DefaultRefusalHold, "how long at most a rate.limited, workspace.busy or policy.busy refusal is held, up to its Retry-After, before it is answered, so that a producer retrying at once spins no faster than its share (0: answer at once)")
	f.StringVar(&o.Pool, "pool", "", "serve the workspaces of this bus pool, from its buckets on the --nats-url cluster, as they are put there (docs/pools.md)")
	f.StringVar(&o.PoolReplica, "pool-replica", "", "this replica's name in the pool's status bucket (default: the host name)")
	f.StringVar(&o.SharedRecordsMaxBytes, "shared-records-max-bytes", "", "with --pool, the most each records bucket the pooled workspaces share holds, in bytes or as a Kubernetes quantity (10Gi), from 1Mi to 1Pi; past it new messages are refused 507 workspace.storage_full. A bucket keeps the largest bound asked for (docs/pools.md); empty asks for none")
	f.DurationVar(&o.DrainPeriod, "drain-period", DefaultDrainPeriod, "on SIGTERM, how long the bus goes on answering, with /readyz failing, so that load balancers stop sending it requests before it stops listening (0: stop at once)")
	f.IntVar(&o.RequestConcurrency, "request-concurrency", bus.DefaultRequestConcurrency, "publish requests of one workspace past authentication at once, for workspaces whose configuration sets no requestConcurrency; past it 503 workspace.busy")
	f.BoolVar(&o.AccessLog, "access-log", true, "log one line per request on the publish port (--access-log=false turns it off)")
	f.IntVar(&o.TokenAttempts.PerClientAddress, "token-failures-per-client-address", bus.DefaultTokenAttempts().PerClientAddress, "failed token requests with one client id from one source address, within --token-failure-window, that lock the client id out from that address (0: no limit)")
	f.IntVar(&o.TokenAttempts.PerClient, "token-failures-per-client", bus.DefaultTokenAttempts().PerClient, "failed token requests with one client id from all addresses, within --token-failure-window, after which only addresses it succeeded from may try it (0: no limit)")
	f.IntVar(&o.TokenAttempts.PerAddress, "token-failures-per-address", bus.DefaultTokenAttempts().PerAddress, "failed token requests from one source address, within --token-failure-window, that lock it out (0: no limit)")
	f.IntVar(&o.Consumers.PerConnection, "consumers-per-connection", store.DefaultConsumerLimits().PerConnection, "durable consumers one connection may create through the consumer routes (0: no limit)")
	f.DurationVar(&o.Consumers.InactiveThreshold, "consumer-inactive-threshold", store.DefaultConsumerLimits().InactiveThreshold, "how long a durable consumer may go unused before it is removed (0: never)")
	f.DurationVar(&o.TokenAttempts.Window, "token-failure-window", bus.DefaultTokenAttempts().Window, "window of the token failure limits, and how long a lockout lasts")
	f.StringVar(&o.TLSCertFile, "tls-cert-file", "", "PEM certificate chain: the publish port then serves HTTPS only (reloaded when the file changes)")
	f.StringVar(&o.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	f.StringVar(&o.TLSClientCAFile, "tls-client-ca-file", "", "PEM authorities whose client certificates are accepted (mutual TLS)")
	f.StringSliceVar(&o.TrustedProxies, "trusted-proxies", nil, "addresses or CIDRs of the proxies whose X-Forwarded-For gives the client's address (default: none, the peer's address)")
	f.BoolVar(&o.Profiling, "profiling", false, "also serve Go's runtime profiles (heap, CPU, goroutines) under /debug/pprof/ on the operations port")
	f.StringVar(&o.FaultKill, "fault-kill", "", "crash drill: SIGKILL the process at this publish fault point")
	_ = f.MarkHidden("fault-kill")
}

func (o *ServeOptions) validate() error {
	if err := validateLogFlags(o.LogFormat, o.LogLevel); err != nil {
		return err
	}
	if o.Pool != "" && o.NATSURL == "" {
		return usageError{errors.New("--pool needs --nats-url: a pool's replicas share an external NATS cluster")}
	}
	if o.DrainPeriod < 0 || o.DrainPeriod > time.Minute {
		return usageError{errors.New("--drain-period must be between 0 and 1m")}
	}
	if o.RefusalHold < 0 || o.RefusalHold > time.Minute {
		return usageError{errors.New("--refusal-hold must be between 0 and 1m")}
	}
	if o.RequestConcurrency < 0 || o.RequestConcurrency > 10000 {
		return usageError{errors.New("--request-concurrency must be between 1 and 10000")}
	}
	if o.MaxConnections < 0 {
		return usageError{errors.New("--max-connections must be 0 or more")}
	}
	if o.Consumers.PerConnection < 0 || o.Consumers.InactiveThreshold < 0 {
		return usageError{errors.New("--consumers-per-connection and --consumer-inactive-threshold must be 0 or more")}
	}
	if a := o.TokenAttempts; a.PerClientAddress < 0 || a.PerClient < 0 || a.PerAddress < 0 || a.Window < time.Second {
		return usageError{errors.New("--token-failures-per-client-address, --token-failures-per-client and --token-failures-per-address must be 0 or more, --token-failure-window at least 1s")}
	}
	if o.Sync != SyncAlways && o.Sync != SyncInterval {
		return usageError{fmt.Errorf("--sync must be %s or %s", SyncAlways, SyncInterval)}
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return usageError{errors.New("--tls-cert-file and --tls-key-file go together")}
	}
	if o.TLSClientCAFile != "" && o.TLSCertFile == "" {
		return usageError{errors.New("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")}
	}
	if _, err := parseProxies(o.TrustedProxies); err != nil {
		return err
	}
	if o.FaultKill != "" {
		known := false
		for _, p := range publish.FaultPoints {
			known = known || string(p) == o.FaultKill
		}
		if !known {
			return usageError{fmt.Errorf("--fault-kill: unknown fault point %q", o.FaultKill)}
		}
	}
	return nil
}

func newServeCommand() *cobra.Command {
	o := &ServeOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Args:  cobra.NoArgs,
		Short: "Serve the publish API of the workspaces in the configuration files",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(o.Configs) == 0 && o.Pool == "" {
				return usageError{errors.New("at least one --config (or --pool) is required")}
			}
			if err := o.validate(); err != nil {
				return err
			}
			var cfgs []*config.Workspace
			seen := map[string]string{}
			for _, p := range o.Configs {
				f, err := configfile.Open(p)
				if err != nil {
					return err
				}
				cfg := f.Workspace
				o.watch = append(o.watch, f)
				if other, dup := seen[cfg.ID]; dup {
					return usageError{fmt.Errorf("workspace %q is configured by both %s and %s", cfg.ID, other, p)}
				}
				seen[cfg.ID] = p
				cfgs = append(cfgs, cfg)
			}
			o.ReleaseStartPages = true
			return Serve(cmd.Context(), *o, cfgs, slog.New(newLogHandler(cmd.ErrOrStderr(), o.LogFormat, o.LogLevel)), nil)
		},
	}
	o.bind(cmd)
	cmd.Flags().StringArrayVar(&o.Configs, "config", nil, "workspace configuration file (repeatable)")
	readEnv(cmd)
	return cmd
}

// DefaultDrainPeriod is --drain-period's default: longer than endpoints
// take to leave a Service's load balancing, short enough that the drain
// and the 15 s to complete what is in progress fit in a pod's default 30 s
// grace period.
const DefaultDrainPeriod = 5 * time.Second

// shutdownTimeout bounds the requests in progress when a bus stops.
const shutdownTimeout = 15 * time.Second

// DefaultMaxConnections is --max-connections' default: with
// bus.StalledConnectionBytes each, at most about 640 MiB held by clients
// that have not been admitted.
const DefaultMaxConnections = 10_000

// applyMemoryLimit sets the Go memory limit to nine tenths of limit (a
// Kubernetes quantity or bytes), leaving the rest to the stacks, the
// embedded store's buffers and the runtime; it returns the limit set, 0
// when limit is empty or GOMEMLIMIT is set (the runtime has read it).
func applyMemoryLimit(limit string) (int64, error) {
	if limit == "" || os.Getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(limit)
	if err != nil || q.Value() <= 0 {
		return 0, fmt.Errorf("--memory-limit %q: want bytes or a quantity such as 1Gi", limit)
	}
	set := q.Value() / 10 * 9
	debug.SetMemoryLimit(set)
	return set, nil
}

// sharedRecordsBound parses --shared-records-max-bytes: 0 when unset.
func sharedRecordsBound(o ServeOptions) (int64, error) {
	if o.SharedRecordsMaxBytes == "" {
		return 0, nil
	}
	if o.Pool == "" {
		return 0, errors.New("--shared-records-max-bytes needs --pool: only a pool's workspaces share records buckets")
	}
	q, err := resource.ParseQuantity(o.SharedRecordsMaxBytes)
	if err != nil || q.Value() < 1<<20 || q.Value() > 1<<50 {
		return 0, fmt.Errorf("--shared-records-max-bytes %q: want bytes or a quantity such as 10Gi, from 1Mi to 1Pi (as a BusPool's spec.sharedRecords.maxBytes)", o.SharedRecordsMaxBytes)
	}
	return q.Value(), nil
}

// Serve runs the bus until ctx ends: the store (embedded or external), the
// publish API and the operations endpoints. ready, when set, is called with
// the bound addresses once both listen.
func Serve(ctx context.Context, o ServeOptions, cfgs []*config.Workspace, log *slog.Logger, ready func(api, ops net.Addr)) error {
	for _, cfg := range cfgs {
		// Story heads live in the topic: it must remember a story at
		// least as long as its message ids are remembered.
		if o.TopicRetention != 0 && cfg.Topic.MaxAge.Duration == 0 && o.TopicRetention < cfg.IdempotencyWindow.Duration {
			return usageError{fmt.Errorf("--topic-retention %s is shorter than workspace %q's idempotencyWindow %s", o.TopicRetention, cfg.ID, cfg.IdempotencyWindow.Duration)}
		}
	}
	if limit, err := applyMemoryLimit(o.MemoryLimit); err != nil {
		return usageError{err}
	} else if limit > 0 {
		log.Info("Go memory limit set", "bytes", limit, "from", "--memory-limit")
	}
	recordsBound, err := sharedRecordsBound(o)
	if err != nil {
		return usageError{err}
	}
	if o.NATSURL != "" && (o.NATSListen != "" || o.Sync != SyncAlways || o.SyncInterval != 0) {
		log.Warn("--sync, --sync-interval and --nats-listen apply to the embedded store only; the external cluster's own configuration decides")
	}
	var faults publish.Faults
	if o.FaultKill != "" {
		faults = func(_ context.Context, p publish.FaultPoint, _ string) error {
			if string(p) == o.FaultKill {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			return nil
		}
	}
	proxies, err := parseProxies(o.TrustedProxies)
	if err != nil {
		return err
	}
	var access *slog.Logger
	if o.AccessLog {
		access = log
	}
	tp, err := newTracerProvider(ctx, os.Getenv, "storybus-bus")
	if err != nil {
		return err
	}
	bo := bus.Options{Faults: faults, TopicRetention: o.TopicRetention, Logger: log, AccessLog: access, TokenAttempts: &o.TokenAttempts, TrustedProxies: proxies, Consumers: &o.Consumers,
		RequestConcurrency: o.RequestConcurrency, RefusalHold: o.RefusalHold}
	if o.TLSCertFile != "" {
		// Workspaces may bring key pairs of their own only to a bus that
		// serves HTTPS.
		bo.Hosts = tlsconfig.NewHosts()
	}
	if tp != nil {
		bo.TracerProvider = tp
		logTracingErrors(log)
		defer func() {
			// The last spans are sent before the process ends.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn("sending the last traces failed", "error", err)
			}
		}()
		log.Info("tracing requests", "exporter", "otlp")
	}
	ro := bus.RunOptions{
		DataDir: o.DataDir, SyncAlways: o.Sync == SyncAlways, SyncInterval: o.SyncInterval, NATSListen: o.NATSListen,
		NATSURL: o.NATSURL, NATSCredentials: o.NATSCreds, Replicas: o.Replicas, SharedBuckets: o.Pool != "",
		SharedRecordsMaxBytes: recordsBound,
		Bus:                   bo, Workspaces: cfgs,
	}
	return bus.Run(ctx, ro, func(ctx context.Context, srv *bus.Server) error {
		warnSingleCopy(o, srv.Store(), log)
		if o.Pool != "" {
			if err := servePool(ctx, o, srv, log); err != nil {
				return err
			}
		}
		return serveHTTP(ctx, o, cfgs, srv, log, ready)
	})
}

// warnSingleCopy warns when the bus creates single-copy streams and
// buckets on a NATS cluster: --replicas is 1 unless given, and a bus run
// by hand against a cluster without it keeps one copy of what it writes,
// which a lost server loses.
func warnSingleCopy(o ServeOptions, st *store.Store, log *slog.Logger) {
	if o.NATSURL == "" || o.Replicas > 1 || st == nil || st.Conn == nil {
		return
	}
	if cluster := st.Conn.ConnectedClusterName(); cluster != "" {
		log.Warn("the streams and buckets this bus creates on a NATS cluster keep one copy (--replicas 1): a lost server loses what it held; give --replicas 3 on a three-node cluster",
			"cluster", cluster, "replicas", o.Replicas)
	}
}

// processStarted is when the process started, near enough (its packages'
// initialisation): the bus logs how long it took to serve.
var processStarted = time.Now()

// A pool replica waits for the pool's current workspaces before it
// listens: at most poolSyncTimeout, and poolSyncPerWorkspace more for each
// workspace the pool holds, so that a large pool on a slow cluster is not
// given up on (and started again from nothing) while it progresses.
const (
	poolSyncTimeout      = time.Minute
	poolSyncPerWorkspace = 100 * time.Millisecond
)

// servePool starts serving the workspaces of pool o.Pool as they are put
// there, and returns once those the pool holds now are applied.
func servePool(ctx context.Context, o ServeOptions, srv *bus.Server, log *slog.Logger) error {
	replica := o.PoolReplica
	if replica == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--pool-replica: %w", err)
		}
		replica = h
	}
	p, err := pool.Open(ctx, srv.Store().JS, o.Pool, o.Replicas)
	if err != nil {
		return err
	}
	syncTimeout := poolSyncTimeout
	if st, err := p.Documents.Status(ctx); err == nil {
		syncTimeout += time.Duration(st.Values()) * poolSyncPerWorkspace
	}
	synced := make(chan struct{})
	go func() {
		// A watch that ends (the cluster lost, the bucket recreated) is
		// started again: it delivers the current set first, so the
		// replica converges.
		onSynced := func() { close(synced) }
		for ctx.Err() == nil {
			err := p.Serve(ctx, replica, srv, log, onSynced)
			onSynced = nil
			if err != nil {
				log.Error("pool watch ended; watching again", "pool", o.Pool, "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	select {
	case <-synced:
		log.Info("serving pool", "pool", o.Pool, "replica", replica)
		return nil
	case <-ctx.Done():
		return nil
	case <-time.After(syncTimeout):
		return fmt.Errorf("pool %s: its workspaces did not arrive within %s", o.Pool, syncTimeout)
	}
}

// opsHandler is srv's operations port, with Go's runtime profiles under
// /debug/pprof/ when profiling is set.
func opsHandler(srv *bus.Server, profiling bool) http.Handler {
	if !profiling {
		return srv.OpsHandler()
	}
	mux := http.NewServeMux()
	mux.Handle("/", srv.OpsHandler())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveHTTP serves srv's publish API and operations endpoints, and reloads
// the watched configuration files, until ctx ends or a listener fails.
func serveHTTP(ctx context.Context, o ServeOptions, cfgs []*config.Workspace, srv *bus.Server, log *slog.Logger, ready func(api, ops net.Addr)) error {
	for _, f := range o.watch {
		path := f.Path
		// A changed file is applied in place; one that does not load or
		// compile is logged and counted, and the previous one stays.
		err := configfile.Watch(ctx, path, f, func(cfg *config.Workspace, err error) error {
			id, _ := configfile.WorkspaceOf(err)
			if err == nil {
				id = cfg.ID
				err = srv.Apply(ctx, cfg)
			}
			srv.ConfigLoaded(path, id, err)
			if err == nil {
				log.Info("workspace configuration reloaded", "file", path, "workspace", cfg.ID)
			}
			return err
		})
		if err != nil {
			return err
		}
	}

	tlsConfig, err := serverTLS(ctx, o, srv, log)
	if err != nil {
		return err
	}
	apiLn, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return err
	}
	if o.MaxConnections > 0 {
		// Past it, new connections wait in the kernel's backlog: what the
		// publish port's clients hold is bounded (docs/security.md).
		apiLn = netutil.LimitListener(apiLn, o.MaxConnections)
	}
	opsLn, err := net.Listen("tcp", o.OpsListen)
	if err != nil {
		apiLn.Close()
		return err
	}
	// Failed handshakes (plain HTTP to the TLS port, an untrusted
	// certificate, TLS 1.1) are the server's own log lines.
	api := bus.NewHTTPServer(srv.Handler(), slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	api.TLSConfig = tlsConfig
	ops := &http.Server{Handler: opsHandler(srv, o.Profiling), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() {
		if tlsConfig != nil {
			// HTTPS only: a plain HTTP request gets Go's 400 "Client sent
			// an HTTP request to an HTTPS server" and the connection closes.
			errc <- api.ServeTLS(apiLn, "", "")
			return
		}
		errc <- api.Serve(apiLn)
	}()
	go func() { errc <- ops.Serve(opsLn) }()
	build := buildinfo.Get()
	log.Info("storybus bus serving", "sinceProcessStart", time.Since(processStarted).Round(time.Millisecond).String(), "version", build.Version, "commit", build.Commit, "goVersion", build.GoVersion, "api", apiLn.Addr().String(), "ops", opsLn.Addr().String(), "tls", tlsConfig != nil, "embedded", o.NATSURL == "", "soleWriter", srv.SoleWriter(), "sync", o.Sync)
	if ready != nil {
		ready(apiLn.Addr(), opsLn.Addr())
	}
	if o.ReleaseStartPages {
		// Serving: the start is behind the bus. The pages of the binary
		// only it touched (every package's initialiser, the operator's
		// included) were most of an idle bus's resident memory.
		unmapStartPages(log, startpages.Unmap)
	}
	select {
	case <-ctx.Done():
		// Stopping: not ready from now on, answering what still arrives
		// (each answer closing its connection, so that clients reconnect
		// to another replica) until the load balancers have taken the bus
		// out.
		srv.Drain()
		if o.DrainPeriod > 0 {
			log.Info("stopping: not ready, draining", "drainPeriod", o.DrainPeriod.String())
			select {
			case <-time.After(o.DrainPeriod):
			case err = <-errc:
			}
		}
	case err = <-errc:
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	_ = api.Shutdown(shutdownCtx)
	_ = ops.Shutdown(shutdownCtx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// serverTLS returns the publish port's TLS configuration, or nil without
// --tls-cert-file: the bus's key pair, and the workspaces' own for their
// host names. The bus's key pair is reloaded when its files change; a pair
// that does not load is reported through the server like a rejected
// configuration, and the previous one keeps serving.
func serverTLS(ctx context.Context, o ServeOptions, srv *bus.Server, log *slog.Logger) (*tls.Config, error) {
	if o.TLSCertFile == "" {
		return nil, nil
	}
	pair, err := tlsconfig.LoadKeyPair(o.TLSCertFile, o.TLSKeyFile)
	if err != nil {
		return nil, err
	}
	var clientCAs *x509.CertPool
	if o.TLSClientCAFile != "" {
		if clientCAs, err = tlsconfig.LoadClientCAs(o.TLSClientCAFile); err != nil {
			return nil, err
		}
	}
	if err := srv.ServeCertificate(pair.Leaf); err != nil {
		return nil, err
	}
	err = pair.Watch(ctx, func(err error) {
		srv.KeyPairLoaded(o.TLSCertFile, err)
		if err == nil {
			log.Info("TLS key pair reloaded", "file", o.TLSCertFile, "notAfter", pair.Leaf().NotAfter)
		}
	})
	if err != nil {
		return nil, err
	}
	return tlsconfig.Server(pair, srv.Hosts(), clientCAs), nil
}

// parseProxies reads the trusted proxies: CIDRs, or single addresses.
func parseProxies(vs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vs {
		v = strings.TrimSpace(v)
		var p netip.Prefix
		var err error
		if strings.Contains(v, "/") {
			p, err = netip.ParsePrefix(v)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(v); err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return nil, usageError{fmt.Errorf("--trusted-proxies: %w", err)}
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// unmapStartPages unmaps the pages of the binary only the process's
// start touched (package startpages; mode says whether they also leave
// the page cache), and logs what it did.
func unmapStartPages(log *slog.Logger, mode startpages.Mode) {
	before, after, err := startpages.Release(mode)
	switch {
	case errors.Is(err, startpages.ErrNotDropped):
		log.Info("start-up pages of the binary unmapped, left in the page cache", "residentBytesBefore", before, "reason", err.Error())
	case err != nil && after == before:
		log.Info("start-up pages of the binary kept", "reason", err.Error())
	case err != nil:
		// Unmapped; what is resident after could not be read.
		log.Info("start-up pages of the binary unmapped", "residentBytesBefore", before, "droppedFromPageCache", mode == startpages.Evict, "reason", err.Error())
	default:
		log.Info("start-up pages of the binary unmapped", "residentBytesBefore", before, "residentBytesAfter", after, "droppedFromPageCache", mode == startpages.Evict)
	}
}
