// Package bus is the bus's HTTP server: the per-workspace publish and token
// routes, composed of the stages of SPEC §3.2 in order, over the idempotent
// publish core of package publish, and the operations endpoints (health,
// readiness, metrics).
package bus

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/bus/limits"
	"github.com/storybus/storybus/bus/publish"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/bus/tlsconfig"
	"github.com/storybus/storybus/policy"
)

// MaxBodyBytes is the largest message the bus accepts.
const MaxBodyBytes = 240_000

// Options configure a Server.
type Options struct {
	// Store is the JetStream connection.
	Store *store.Store
	// Clock is the bus's clock: tokens are issued and checked, and limits
	// measured, against it.
	Clock publish.Clock
	// StoreClock is the store's clock, which the publish core measures the
	// 30 s lease on; default the store's own (tests cross the lease with
	// it).
	StoreClock publish.StoreClock
	// Faults are the publish core's fault points (tests, fault drills).
	Faults publish.Faults
	// Publisher overrides the topic publisher (tests count calls).
	Publisher publish.Publisher
	// TopicRetention is how long the topic keeps messages; 0 keeps them
	// until the store's limits.
	TopicRetention time.Duration
	// SoleWriter says that this server is the only writer of its store's
	// topics: the process owns the embedded store (its data directory is
	// locked), the store serves no NATS clients, and no other server in
	// the process serves the same workspaces. Snapshots are then published
	// without the store's compare-and-swap (publish.Options.SoleWriter).
	SoleWriter bool
	// Hosts, when the bus serves HTTPS, is where the key pairs workspaces
	// bring of their own (config.Workspace.TLS) are presented by host
	// name; nil on a bus serving plain HTTP, which refuses them.
	Hosts *tlsconfig.Hosts
	// WithoutPolicy skips the workspace policy (stages 4, 5, 9 and 12 accept
	// everything, no limits): for measuring what the policy costs, never
	// for serving.
	WithoutPolicy bool
	// TokenAttempts limits failed attempts at the token endpoint; nil
	// takes DefaultTokenAttempts().
	TokenAttempts *TokenAttempts
	// TrustedProxies are the addresses of the proxies (a Gateway, an
	// Ingress controller, a load balancer) whose X-Forwarded-For gives the
	// client's address. Empty: no proxy is trusted and the client's
	// address is the peer's.
	TrustedProxies []netip.Prefix
	// Consumers bound the consumer routes' durable consumers; nil takes
	// store.DefaultConsumerLimits().
	Consumers *store.ConsumerLimits
	// RequestTimeout bounds a whole publish; default 10s.
	RequestTimeout time.Duration
	// RefusalHold is how long at most a refusal meaning "faster than your
	// share" (rate.limited, workspace.busy, policy.busy) is held, up to its
	// Retry-After, before it is answered; 0 answers at once (serve holds
	// DefaultRefusalHold).
	RefusalHold time.Duration
	// HeldRefusals bounds the refusals held at once; past it they are
	// answered at once. 0 takes DefaultHeldRefusals.
	HeldRefusals int
	// RequestConcurrency is the requestConcurrency of workspaces whose
	// configuration sets none; 0 takes DefaultRequestConcurrency.
	RequestConcurrency int
	// BodyBytesInFlight bounds the bytes of request bodies being read at
	// once, across workspaces; 0 takes DefaultBodyBytesInFlight.
	BodyBytesInFlight int64
	// Logger receives the bus's log lines; those about a request carry its
	// requestID.
	Logger *slog.Logger
	// TracerProvider, when set, traces every request on the publish port
	// (a server span, a span per stage, client spans for the publish
	// core's store operations); nil traces nothing, but a producer's
	// traceparent still reaches the published message's headers.
	TracerProvider trace.TracerProvider
	// AccessLog, when set, receives one line per request on the publish
	// port, at info level (see Server.accessLog); nil writes none.
	AccessLog *slog.Logger
	Metrics   *Metrics
}

// Server serves the publish API of one or more workspaces.
type Server struct {
	opts      Options
	attempts  TokenAttempts
	consumers *store.Consumers
	log       *slog.Logger
	access    *slog.Logger
	tracer    trace.Tracer // nil when tracing is off
	metrics   *Metrics
	// applying serialises Apply and Remove of one workspace, and of those
	// whose ids fall on the same stripe, so that different workspaces are
	// built at once (a pool replica opens its workspaces so at start).
	applying [applyStripes]sync.Mutex
	// mu serialises the replacements of the workspaces map.
	mu         sync.Mutex
	workspaces atomic.Pointer[map[string]*workspace]
	// held counts the refusals holdRefusal is holding.
	held atomic.Int64
	// draining is set by Drain: the bus is stopping.
	draining atomic.Bool
	// storeAnswered is when (Clock, Unix nanoseconds) the store last
	// answered a readiness check; 0 before it ever did.
	storeAnswered atomic.Int64
	// pipelines are the routes' stage lists.
	pipelines pipelines
	// bodyBytes are the bytes reserved by the bodies being read after
	// authentication, signedBodyBytes by those read before it (the
	// AWS-signed route).
	bodyBytes, signedBodyBytes atomic.Int64
	engine                     *gin.Engine
	// rejected holds, by source file, the last failed load of a workspace
	// configuration or of the publish port's TLS key pair.
	rejectedMu sync.Mutex
	rejected   map[string]rejection
	// tokens caches verified bearer tokens (see verifyToken).
	tokens *auth.Cache
}

// workspace is one served workspace: its current configuration, swapped
// atomically on reload, its publish core, and its limiter (rate limits,
// quotas and token attempts).
type workspace struct {
	id      string
	cfg     atomic.Pointer[config.Workspace]
	policy  *policy.Engine
	core    *publish.Core
	limiter *limits.Limiter
	// capacity bounds the workspace's requests past authentication.
	capacity capacity
	// opened is what building it took, logged when it is first served.
	opened openTimes
}

// openTimes are the parts of a workspace's build: its policy compiled,
// its stream and buckets opened, its records rebuilt from the topic.
type openTimes struct{ policy, store, rebuild time.Duration }

func init() { gin.SetMode(gin.ReleaseMode) }

// New returns a server with no workspaces; Apply adds them.
func New(o Options) *Server {
	if o.Clock == nil {
		o.Clock = publish.SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.HeldRefusals <= 0 {
		o.HeldRefusals = DefaultHeldRefusals
	}
	if o.RequestConcurrency <= 0 {
		o.RequestConcurrency = DefaultRequestConcurrency
	}
	if o.BodyBytesInFlight <= 0 {
		o.BodyBytesInFlight = DefaultBodyBytesInFlight
	}
	log := slog.New(requestIDs{o.Logger.Handler()})
	s := &Server{opts: o, attempts: DefaultTokenAttempts(), log: log, access: o.AccessLog, metrics: o.Metrics, tokens: auth.NewCache(maxCachedTokens)}
	if o.TracerProvider != nil {
		s.tracer = o.TracerProvider.Tracer(TracerName)
	}
	if o.TokenAttempts != nil {
		s.attempts = *o.TokenAttempts
	}
	consumers := store.DefaultConsumerLimits()
	if o.Consumers != nil {
		consumers = *o.Consumers
	}
	if o.Store != nil {
		s.consumers = o.Store.Consumers(consumers, log)
	}
	s.pipelines = pipelines{
		publish: s.publishStages(), publishIAM: s.publishIAMStages(),
		pull: s.pullStages(), ack: s.ackStages(),
	}
	s.workspaces.Store(&map[string]*workspace{})
	s.engine = s.routes()
	s.metrics.Registry.MustRegister(stateCollector{s})
	return s
}

// Apply serves the workspace configuration, adding the workspace or
// replacing its configuration in place without interrupting requests: it
// builds what the configuration needs (build), then swaps it in (swapIn).
// A configuration that fails to build leaves the workspace as it was. A
// failure of the store's rather than the configuration's is marked
// store.ErrUnavailable: the same configuration may apply later.
func (s *Server) Apply(ctx context.Context, cfg *config.Workspace) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("workspace %q: %w", cfg.ID, err)
	}
	var pair *tls.Certificate
	if cfg.TLS != nil {
		if s.opts.Hosts == nil {
			return fmt.Errorf("workspace %q: tls: it brings a key pair of its own, and this bus serves plain HTTP", cfg.ID)
		}
		p, err := cfg.TLS.KeyPair()
		if err != nil {
			return fmt.Errorf("workspace %q: tls: %w", cfg.ID, err)
		}
		pair = &p
	}
	l := s.applyLock(cfg.ID)
	l.Lock()
	defer l.Unlock()
	ws, added, err := s.build(ctx, cfg)
	if err != nil {
		return err
	}
	s.swapIn(ws, cfg, added)
	s.presentKeyPair(cfg, pair)
	return nil
}

// presentKeyPair presents the workspace's own key pair for its host
// names, or stops presenting one it no longer has.
func (s *Server) presentKeyPair(cfg *config.Workspace, pair *tls.Certificate) {
	switch {
	case s.opts.Hosts == nil:
	case pair == nil:
		s.opts.Hosts.Remove(cfg.ID)
	default:
		if contested := s.opts.Hosts.Set(cfg.ID, pair, cfg.TLS.Hosts); len(contested) > 0 {
			s.log.Warn("another workspace claims host names of this workspace's key pair: neither pair is presented for them", "workspace", cfg.ID, "hosts", contested)
		}
	}
}

// applyStripes is how many workspaces' Apply can run at once, at most.
const applyStripes = 64

// applyLock is the lock of workspace id's stripe of s.applying.
func (s *Server) applyLock(id string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return &s.applying[h.Sum32()%applyStripes]
}

// build makes what cfg needs before it is served: for a workspace not yet
// served, its store objects, policy engine and publish core, with the
// records a crash lost rebuilt from the topic; for one already served, its
// store objects and its policy compiled and put in force (policy.Update
// swaps atomically, or leaves the old one). added says which. The
// workspace's applyLock is held.
func (s *Server) build(ctx context.Context, cfg *config.Workspace) (ws *workspace, added bool, err error) {
	if ws, ok := (*s.workspaces.Load())[cfg.ID]; ok {
		// The store first: should it fail, the policy and the configuration
		// both stay as they were.
		sw, err := s.openStore(ctx, cfg)
		if err != nil {
			return nil, false, store.Unavailable(err)
		}
		// The stream has the retention now, whatever comes next.
		ws.core.SetTopicRetention(s.topicRetention(cfg))
		if sw.RecordsBucket != ws.core.RecordsBucket() {
			return nil, false, fmt.Errorf("workspace %q: its records are in bucket %s, and this configuration's idempotencyWindow would keep them in %s: a pooled workspace's idempotencyWindow cannot change in place", cfg.ID, ws.core.RecordsBucket(), sw.RecordsBucket)
		}
		if err := ws.policy.Update(ctx, cfg); err != nil {
			return nil, false, fmt.Errorf("workspace %q: %w", cfg.ID, err)
		}
		return ws, false, nil
	}
	started := time.Now()
	engine, err := policy.New(ctx, cfg)
	if err != nil {
		return nil, false, fmt.Errorf("workspace %q: %w", cfg.ID, err)
	}
	compiled := time.Now()
	// The limits bucket too, at the same time as the topic and records:
	// rate limits, quotas and token attempts are counted from the first
	// request on.
	var (
		sw      *store.Workspace
		limiter *limits.Limiter
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		sw, err = s.openStore(gctx, cfg)
		return err
	})
	g.Go(func() (err error) {
		if limiter, err = s.openLimiter(gctx, cfg.ID); err != nil {
			return fmt.Errorf("workspace %q: %w", cfg.ID, err)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, false, store.Unavailable(err)
	}
	// Published messages carry the request's trace context for their
	// consumers; with tracing on, every store operation is a span too.
	var pub publish.Publisher = s.opts.Store.JS
	if s.opts.Publisher != nil {
		pub = s.opts.Publisher
	}
	pub = store.TracePublisher(pub, s.opts.TracerProvider)
	if s.opts.TracerProvider != nil {
		sw = sw.Traced(s.opts.TracerProvider)
	}
	ws = &workspace{id: cfg.ID, policy: engine, limiter: limiter, core: publish.New(sw, s.opts.Store.JS, publish.Options{
		StoreClock:     s.opts.StoreClock,
		Faults:         s.opts.Faults,
		Publisher:      pub,
		Logger:         s.log,
		Observe:        s.metrics.storeObserver(cfg.ID),
		SoleWriter:     s.opts.SoleWriter,
		TopicRetention: s.topicRetention(cfg),
	})}
	opened := time.Now()
	// A crash may have left published messages without their records:
	// they are rebuilt from the topic before the first publish.
	rec, err := ws.core.Recover(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("workspace %q: rebuilding records from the topic: %w", cfg.ID, store.Unavailable(err))
	}
	rebuilt := time.Now()
	ws.opened = openTimes{policy: compiled.Sub(started), store: opened.Sub(compiled), rebuild: rebuilt.Sub(opened)}
	if rec.Messages > 0 {
		s.log.Info("checked the records of the topic's latest messages", "workspace", cfg.ID, "read_since", rec.From, "messages", rec.Messages, "records", rec.Records, "records_took", rec.RecordsTook.Round(time.Millisecond).String(), "read_alone", rec.Alone, "took", ws.opened.rebuild.Round(time.Millisecond).String())
	}
	if rec.Rebuilt > 0 || rec.Marked > 0 {
		s.log.Warn("rebuilt records a crash had lost", "workspace", cfg.ID, "read_since", rec.From, "messages", rec.Messages, "rebuilt", rec.Rebuilt, "marked", rec.Marked)
	}
	if rec.Skipped > 0 {
		s.log.Warn("the topic holds messages the bus did not publish", "workspace", cfg.ID, "skipped", rec.Skipped)
	}
	return ws, true, nil
}

// openStore creates or updates the workspace's stream and buckets as cfg
// says: its idempotency window, its topic retention and limits, in force
// on the stream once it returns.
func (s *Server) openStore(ctx context.Context, cfg *config.Workspace) (*store.Workspace, error) {
	return s.opts.Store.OpenConfigured(ctx, cfg, s.opts.TopicRetention)
}

// topicRetention is how long cfg's topic keeps messages: its own
// topic.maxAge, or the bus's --topic-retention.
func (s *Server) topicRetention(cfg *config.Workspace) time.Duration {
	return cfg.Topic.Retention(s.opts.TopicRetention)
}

// swapIn puts cfg in force for ws: its capacity and configuration, and, for
// a workspace added, ws in the map requests find it in. The workspace's
// applyLock is held.
func (s *Server) swapIn(ws *workspace, cfg *config.Workspace, added bool) {
	ws.capacity.resize(cmp.Or(cfg.RequestConcurrency, s.opts.RequestConcurrency))
	ws.cfg.Store(cfg)
	if !added {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	current := *s.workspaces.Load()
	next := make(map[string]*workspace, len(current)+1)
	for k, v := range current {
		next[k] = v
	}
	next[cfg.ID] = ws
	s.workspaces.Store(&next)
	s.log.Info("serving workspace", "workspace", cfg.ID, "connections", len(cfg.Connections),
		"policy", ws.opened.policy.Round(time.Millisecond).String(), "store", ws.opened.store.Round(time.Millisecond).String(), "rebuild", ws.opened.rebuild.Round(time.Millisecond).String())
}

// Config returns the configuration a workspace is served with.
func (s *Server) Config(id string) (*config.Workspace, bool) {
	ws, ok := (*s.workspaces.Load())[id]
	if !ok {
		return nil, false
	}
	return ws.cfg.Load(), true
}

// Wait blocks until every workspace's background writes are done: the
// record marks, and the rate and quota counts.
func (s *Server) Wait() {
	for _, ws := range *s.workspaces.Load() {
		ws.core.Wait()
		ws.limiter.Wait()
	}
}

func (s *Server) workspace(id string) (*workspace, bool) {
	ws, ok := (*s.workspaces.Load())[id]
	return ws, ok
}

// Handler returns the publish API.
func (s *Server) Handler() http.Handler { return s.engine }

// closeWhileDraining asks the client to close its connection after this
// answer once the bus is draining (Drain): its next request opens a new
// connection, which the load balancer gives a replica that is not
// stopping. Connections idle when the drain starts are left open rather
// than closed under a client that may be sending on one at that moment
// (http.Server.SetKeepAlivesEnabled(false) would close them at once): the
// next answer on each closes it, and the end of the drain closes the rest.
func (s *Server) closeWhileDraining(c *gin.Context) {
	if s.draining.Load() {
		c.Header("Connection", "close")
	}
	c.Next()
}

func (s *Server) routes() *gin.Engine {
	r := NewEngine(s.opts.TrustedProxies)
	r.Use(s.closeWhileDraining, s.track, s.recovery)
	r.NoRoute(missingAuthenticationToken)
	r.NoMethod(missingAuthenticationToken)
	v1 := r.Group("/v1/tenants/:tenant")
	published := s.observe(s.metrics.observeRequest)
	v1.POST("/messages", published, s.recovery, s.publish)
	v1.POST("/iam/messages", published, s.recovery, s.publishIAM)
	v1.POST("/tokens", s.observe(s.metrics.observeAPI("tokens")), s.recovery, s.token)
	v1.GET("/consumers/:name/messages", s.observe(s.metrics.observeAPI("pull")), s.recovery, s.consume)
	v1.POST("/consumers/:name/acks", s.observe(s.metrics.observeAPI("ack")), s.recovery, s.ack)
	return r
}

// recovery turns a panic into the generic 503 and lets an aborted handler
// drop the connection (the fault points' "process stopped").
func (s *Server) recovery(c *gin.Context) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.ErrorContext(c.Request.Context(), "handler panic", "path", c.Request.URL.Path, "panic", fmt.Sprint(p))
			busUnavailable(c)
			c.Abort()
		}
	}()
	c.Next()
}
