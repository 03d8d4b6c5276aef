package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus"
	"github.com/storybus/storybus/bus/som"
	"github.com/storybus/storybus/bus/store"
	"github.com/storybus/storybus/client"
)

// env is the one process layout every phase runs in: an embedded JetStream
// in a fresh directory, or a NATS cluster (Options.NATSURL, or the local
// one of Options.Cluster), one connection to it (exactly as the bus
// connects), the bus serving its publish API on a loopback listener, and
// the relay on another, both with the bus's HTTP stack.
type env struct {
	o   Options
	dir string
	ns  *server.Server
	// cluster is Options.Cluster's local cluster, nil otherwise.
	cluster *localCluster
	st      *store.Store
	// buses are the bus phase's buses: one, or Options.BusReplicas.
	buses  []*busReplica
	relay  *relay
	client *http.Client
}

// busReplica is one bus of the run, as a replica of a pool runs: its
// server, its connection to the store (the first shares the baselines'),
// its metrics (read for its inside view of a phase) and its publish API.
type busReplica struct {
	st      *store.Store
	srv     *bus.Server
	metrics *bus.Metrics
	api     *http.Server
	base    string
}

// startBus serves a bus on st with its publish API on a loopback
// listener; sole makes it its topics' only writer.
func startBus(st *store.Store, log *slog.Logger, sole bool) (*busReplica, error) {
	b := &busReplica{st: st, metrics: bus.NewMetrics()}
	b.srv = bus.New(bus.Options{Store: st, Logger: log, Metrics: b.metrics, SoleWriter: sole})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b.api = bus.NewHTTPServer(b.srv.Handler(), slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	go func() { _ = b.api.Serve(ln) }()
	b.base = "http://" + ln.Addr().String()
	return b, nil
}

// bus is the first bus: the one tokens are asked of.
func (e *env) bus() *busReplica { return e.buses[0] }

// storeOutMsgs is how many messages the run's store connections have
// sent: the baselines' and the buses'.
func (e *env) storeOutMsgs() uint64 {
	n := e.st.Conn.Stats().OutMsgs
	for _, b := range e.buses[1:] {
		n += b.st.Conn.Stats().OutMsgs
	}
	return n
}

func newEnv(ctx context.Context, o Options) (_ *env, err error) {
	e := &env{o: o}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	url := o.NATSURL
	if o.Cluster > 0 {
		if e.cluster, err = startCluster(ctx, o); err != nil {
			return nil, err
		}
		url = e.cluster.url()
	}
	if url != "" {
		// As a pool's replica connects to its cluster: every stream and
		// bucket replicated, records durable when acknowledged, and kept
		// in the buckets the workspaces share, the baselines' too.
		if e.st, err = store.Connect(store.Options{URL: url, Replicas: o.replicas(), Name: "storybus-bench", SharedBuckets: true}); err != nil {
			return nil, err
		}
	} else {
		if e.dir, err = os.MkdirTemp(o.DataDir, "storybus-bench-"); err != nil {
			return nil, err
		}
		e.ns, err = store.StartEmbedded(store.EmbeddedOptions{
			DataDir:      e.dir,
			SyncAlways:   o.Sync == SyncAlways,
			SyncInterval: o.SyncInterval,
		})
		if err != nil {
			return nil, err
		}
		if e.st, err = store.Connect(store.Options{Embedded: e.ns, Name: "storybus-bench"}); err != nil {
			return nil, err
		}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// As serve runs it: on its embedded store the topics' only writer, on
	// a cluster one of many, every snapshot a compare-and-swap.
	first, err := startBus(e.st, log, e.ns != nil)
	if err != nil {
		return nil, err
	}
	e.buses = append(e.buses, first)
	for i := 1; i < o.BusReplicas; i++ {
		// Each further replica its own connection, as a process of its
		// own has.
		st, err := store.Connect(store.Options{URL: url, Replicas: o.replicas(), Name: fmt.Sprintf("storybus-bench-%d", i), SharedBuckets: true})
		if err != nil {
			return nil, err
		}
		b, err := startBus(st, log, false)
		if err != nil {
			st.Close()
			return nil, err
		}
		e.buses = append(e.buses, b)
	}
	if e.relay, err = startRelay(e.st.JS, log); err != nil {
		return nil, err
	}
	e.client = &http.Client{
		Timeout: 30 * time.Second,
		Transport: keepAlive(&http.Transport{
			Proxy:              nil,
			IdleConnTimeout:    2 * time.Minute,
			DisableCompression: true,
		}, slices.Max(o.Producers)*o.Workspaces),
	}
	return e, nil
}

// keepAlive lets tr keep an idle connection for every one of producers,
// and returns it: a connection per request would measure TCP and TLS
// set-up, not the bus.
func keepAlive(tr *http.Transport, producers int) *http.Transport {
	idle := 2*producers + 4
	tr.MaxIdleConns = idle
	tr.MaxIdleConnsPerHost = idle
	return tr
}

func (e *env) close() {
	if e.client != nil {
		e.client.CloseIdleConnections()
	}
	apis := []*http.Server{e.relayAPI()}
	for _, b := range e.buses {
		apis = append(apis, b.api)
	}
	for _, api := range apis {
		if api != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = api.Shutdown(ctx)
			cancel()
		}
	}
	for i, b := range e.buses {
		b.srv.Wait()
		if i > 0 {
			b.st.Close()
		}
	}
	if e.st != nil {
		e.st.Close()
	}
	if e.ns != nil {
		e.ns.Shutdown()
		e.ns.WaitForShutdown()
	}
	if e.cluster != nil {
		e.cluster.stop()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// publisher writes one message durably.
type publisher interface {
	// publish writes one message. status is the HTTP status for the bus and
	// the relays and 0 otherwise; err is set for anything but an accepted
	// message.
	publish(ctx context.Context, m message) (status int, err error)
}

// target is one way of writing a message durably, opened on fresh streams.
type target interface {
	publisher
	// settle waits for background work the target's writes started.
	settle()
	// streamMessages reports how many messages the target's topic holds.
	streamMessages(ctx context.Context) (uint64, error)
	// remove deletes the target's stream and bucket.
	remove(ctx context.Context) error
}

// open opens the phase's target on fresh streams named after ws.
func (e *env) open(ctx context.Context, p PhaseName, ws string) (target, error) {
	switch p {
	case PhaseBus:
		return e.openBus(ctx, ws)
	case PhaseRaw:
		w, err := e.st.OpenWorkspace(ctx, ws, config.MinIdempotencyWindow, 0)
		if err != nil {
			return nil, err
		}
		return &rawTarget{wsStore{js: e.st.JS, id: ws}, w}, nil
	case PhaseThreeWrite:
		w, err := e.st.OpenWorkspace(ctx, ws, config.MinIdempotencyWindow, 0, store.DurableRecords())
		if err != nil {
			return nil, err
		}
		return &threeWriteTarget{rawTarget{wsStore{js: e.st.JS, id: ws}, w}}, nil
	case PhaseRelay, PhaseRelayTwoWrite:
		// The two-write relay records the way a naive front would: two
		// sequential durable writes, the record fsynced like the message.
		w, err := e.st.OpenWorkspace(ctx, ws, config.MinIdempotencyWindow, 0, store.DurableRecords())
		if err != nil {
			return nil, err
		}
		e.relay.workspaces.Store(ws, &relayWorkspace{ws: w, twoWrite: p == PhaseRelayTwoWrite})
		return &relayTarget{wsStore: wsStore{js: e.st.JS, id: ws}, poster: poster{client: e.client, urls: []string{e.relay.url(ws)}}, r: e.relay}, nil
	}
	return nil, fmt.Errorf("unknown phase %q", p)
}

// relayAPI is the relay's server, or nil before it started.
func (e *env) relayAPI() *http.Server {
	if e.relay == nil {
		return nil
	}
	return e.relay.api
}

// wsStore is what the store-level targets share: the workspace's stream and
// bucket, opened with exactly the bus's configuration.
type wsStore struct {
	js jetstream.JetStream
	id string
}

func (s wsStore) streamMessages(ctx context.Context) (uint64, error) {
	st, err := s.js.Stream(ctx, store.StreamName(s.id))
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// remove deletes the workspace's stream and records, in buckets of its
// own or shared; what an earlier try that timed out removed is not an
// error.
func (s wsStore) remove(ctx context.Context) error {
	_, err := store.DeleteWorkspace(ctx, s.js, s.id)
	return err
}

// busTarget publishes through the bus's HTTP API with a bearer token.
type busTarget struct {
	wsStore
	poster
	e *env
}

// openBus serves a fresh workspace with one connection granted SystemID and
// every message type, and gets its token the way a producer does.
func (e *env) openBus(ctx context.Context, ws string) (*busTarget, error) {
	key, secret := randomSecret(), randomSecret()
	cfg := &config.Workspace{
		ID:         ws,
		SigningKey: key,
		Connections: []config.Connection{{
			Name:       SystemID,
			ClientID:   SystemID,
			SecretHash: config.HashSecret(secret),
			Grant: config.Grant{Publish: config.PublishGrant{
				SystemIDs:    []string{SystemID},
				MessageTypes: []string{som.TypeStoryContext, som.TypeStoryEvent, som.TypeAssetReference},
			}},
		}},
	}
	cfg.Default()
	urls := make([]string, len(e.buses))
	for i, b := range e.buses {
		if err := b.srv.Apply(ctx, cfg); err != nil {
			return nil, err
		}
		urls[i] = b.base + "/v1/tenants/" + ws + "/messages"
	}
	// On a cluster a workspace's buckets just created may have no leader
	// yet: the token endpoint then answers temporarily_unavailable.
	var token string
	var err error
	for deadline := time.Now().Add(tokenWithin); ; {
		token, err = e.token(ctx, ws, SystemID, secret)
		var re *oauth2.RetrieveError
		if err == nil || !errors.As(err, &re) || re.ErrorCode != "temporarily_unavailable" || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, err
	}
	return &busTarget{
		wsStore: wsStore{js: e.st.JS, id: ws},
		poster:  poster{client: e.client, urls: urls, next: new(atomic.Uint64), tokens: client.StaticToken(token)},
		e:       e,
	}, nil
}

// tokenWithin bounds how long a fresh workspace's token endpoint may
// answer that its store is not ready yet.
const tokenWithin = 30 * time.Second

// token gets an access token with the client-credentials flow.
func (e *env) token(ctx context.Context, ws, clientID, secret string) (string, error) {
	cc := clientcredentials.Config{ClientID: clientID, ClientSecret: secret, AuthStyle: oauth2.AuthStyleInHeader,
		TokenURL: e.bus().base + "/v1/tenants/" + ws + "/tokens"}
	tok, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, e.client))
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return tok.AccessToken, nil
}

// poster POSTs messages over HTTP, as a producer does: the bus phase and
// the relay phases send every request with it, through one client, to
// its URL, or to each of its URLs in turn.
type poster struct {
	client *http.Client
	urls   []string
	// next counts the requests sent to several URLs.
	next *atomic.Uint64
	// tokens gives the bearer token of every request; nil sends none.
	tokens client.TokenSource
}

// publish posts one message; anything but 202 is an error.
func (t poster) publish(ctx context.Context, m message) (int, error) {
	url := t.urls[0]
	if len(t.urls) > 1 {
		url = t.urls[t.next.Add(1)%uint64(len(t.urls))]
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(m.body))
	if err != nil {
		return 0, err
	}
	token := ""
	if t.tokens != nil {
		if token, err = t.tokens.Token(ctx); err != nil {
			return 0, fmt.Errorf("token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized && t.tokens != nil {
		// An expired or revoked token: the next request gets a new one.
		t.tokens.Invalidate(token)
	}
	if resp.StatusCode != http.StatusAccepted {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	// Drain the answer so the connection goes back to the pool.
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// settle waits for the bus's background record marks, so they do not
// spill into the next phase.
func (t *busTarget) settle() {
	for _, b := range t.e.buses {
		b.srv.Wait()
	}
}

// inside returns the bus's own mean timings of the phase's workspaces, in
// milliseconds, from its metrics: the handler's answer time of accepted
// messages ("handler") and each store operation's.
func (e *env) inside(targets []target) (map[string]float64, error) {
	ids := map[string]bool{}
	for _, t := range targets {
		if bt, ok := t.(*busTarget); ok {
			ids[bt.id] = true
		}
	}
	var families []*dto.MetricFamily
	for _, b := range e.buses {
		fs, err := b.metrics.Registry.Gather()
		if err != nil {
			return nil, err
		}
		families = append(families, fs...)
	}
	type sum struct {
		seconds float64
		count   uint64
	}
	sums := map[string]sum{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			h := m.GetHistogram()
			if !ids[labels["workspace"]] || h == nil || h.GetSampleCount() == 0 {
				continue
			}
			key := ""
			switch {
			case f.GetName() == "storybus_publish_duration_seconds" && labels["status"] == "202":
				key = "handler"
			case f.GetName() == "storybus_store_operation_duration_seconds" && labels["op"] != "":
				key = labels["op"]
			default:
				continue
			}
			s := sums[key]
			s.seconds += h.GetSampleSum()
			s.count += h.GetSampleCount()
			sums[key] = s
		}
	}
	means := map[string]float64{}
	for key, s := range sums {
		means[key] = s.seconds / float64(s.count) * 1000
	}
	return means, nil
}

// rawTarget is one durable JetStream publish per message, de-duplicated on
// Nats-Msg-Id, to a stream configured like the bus's topic.
type rawTarget struct {
	wsStore
	ws *store.Workspace
}

func (t *rawTarget) topicMsg(m message) *nats.Msg {
	return &nats.Msg{
		Subject: store.Subject(t.ws.ID, som.FamilyStoryContext, m.story),
		Data:    m.body,
		Header:  nats.Header{nats.MsgIdHdr: []string{m.id}},
	}
}

func (t *rawTarget) publish(ctx context.Context, m message) (int, error) {
	_, err := t.js.PublishMsg(ctx, t.topicMsg(m))
	return 0, err
}

func (t *rawTarget) settle() {}

// threeWriteTarget is the naive idempotent publish: create the record,
// publish, mark the record published, each a sequential durable write.
type threeWriteTarget struct{ rawTarget }

func (t *threeWriteTarget) publish(ctx context.Context, m message) (int, error) {
	key := store.EncodeToken(m.id)
	rev, err := t.ws.Records.Create(ctx, key, recordValue(m.body, "recorded"))
	if err != nil {
		return 0, fmt.Errorf("record create: %w", err)
	}
	if _, err := t.js.PublishMsg(ctx, t.topicMsg(m)); err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	if _, err := t.ws.Records.Update(ctx, key, recordValue(m.body, "published"), rev); err != nil {
		return 0, fmt.Errorf("record update: %w", err)
	}
	return 0, nil
}

// randomSecret returns 32 random bytes, hex-encoded: a signing key or a
// client secret.
func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
