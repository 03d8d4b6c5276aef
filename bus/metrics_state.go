package bus

import (
	"context"
	"crypto/x509"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/store"
)

// The bus's state metrics are read when /metrics is scraped, not counted
// as requests pass: whether the bus is ready, which configurations are
// rejected, each durable consumer's backlog and each connection's use of
// its daily quota. The backlog and the quota live in JetStream, shared by
// every replica of a workspace, so every replica reports the same values:
// aggregate them with max, not sum.
var (
	readyDesc = prometheus.NewDesc("storybus_bus_ready",
		"1 when the bus can serve (its /readyz answers 200): the store answers and a workspace is configured; 0 otherwise.", nil, nil)
	rejectedDesc = prometheus.NewDesc("storybus_config_rejected",
		"1 while the last load of a workspace configuration (or TLS key pair, by file) failed and the previous one stays in force.",
		[]string{"workspace"}, nil)
	pendingDesc = prometheus.NewDesc("storybus_consumer_pending_messages",
		"Messages on the workspace's topic that a durable consumer has not been delivered yet (JetStream's num_pending), by consumer and the connection owning it (empty for a consumer not made by the HTTP API).",
		[]string{"workspace", "consumer", "connection"}, nil)
	ackPendingDesc = prometheus.NewDesc("storybus_consumer_ack_pending_messages",
		"Messages delivered to a durable consumer and not acknowledged yet (JetStream's num_ack_pending).",
		[]string{"workspace", "consumer", "connection"}, nil)
	quotaDesc = prometheus.NewDesc("storybus_connection_daily_quota_messages",
		"A connection's daily quota of accepted messages (UTC day), for connections that have one.",
		[]string{"workspace", "connection"}, nil)
	quotaUsedDesc = prometheus.NewDesc("storybus_connection_daily_quota_used_messages",
		"Messages accepted today (UTC) from a connection that has a daily quota, counted across every replica.",
		[]string{"workspace", "connection"}, nil)
	sharedRecordsBytesDesc = prometheus.NewDesc("storybus_shared_records_bytes",
		"Bytes held by a records bucket the pooled workspaces share on the NATS cluster (storybus-records-<window>), as its stream counts them; every replica of every pool on the cluster reports the same bucket.",
		[]string{"bucket"}, nil)
	sharedRecordsMaxBytesDesc = prometheus.NewDesc("storybus_shared_records_max_bytes",
		"The bound in force on a shared records bucket: the largest spec.sharedRecords.maxBytes any pool on the cluster asked for (docs/pools.md); absent while the bucket has none.",
		[]string{"bucket"}, nil)
	certExpiryDesc = prometheus.NewDesc("storybus_tls_certificate_expiry_timestamp_seconds",
		"When the publish port's TLS certificate in use expires, in seconds since the Unix epoch; absent without TLS.", nil, nil)
	workspaceCertExpiryDesc = prometheus.NewDesc("storybus_workspace_tls_certificate_expiry_timestamp_seconds",
		"When the key pair a workspace brings of its own (presented for its host names) expires, in seconds since the Unix epoch; absent for a workspace without one.",
		[]string{"workspace"}, nil)
)

// collectTimeout bounds the store reads of one scrape, well inside
// Prometheus's default scrape timeout of 10s.
const collectTimeout = 5 * time.Second

// stateCollector reads the server's state metrics when scraped.
type stateCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{readyDesc, rejectedDesc, pendingDesc, ackPendingDesc, quotaDesc, quotaUsedDesc, workspaceCertExpiryDesc, sharedRecordsBytesDesc, sharedRecordsMaxBytesDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A workspace whose store cannot
// be read in time is left out of this scrape, and logged.
func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	s := c.s
	ready := 0.0
	if s.Ready(ctx) == nil {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, ready)
	for label := range s.ConfigErrors() {
		ch <- prometheus.MustNewConstMetric(rejectedDesc, prometheus.GaugeValue, 1, label)
	}
	if s.opts.Hosts != nil {
		for ws, notAfter := range s.opts.Hosts.NotAfter() {
			ch <- prometheus.MustNewConstMetric(workspaceCertExpiryDesc, prometheus.GaugeValue, float64(notAfter.Unix()), ws)
		}
	}
	if err := s.collectSharedRecords(ctx, ch); err != nil {
		s.log.Warn("shared records metrics unavailable", "error", err)
	}
	workspaces := *s.workspaces.Load()
	for _, id := range slices.Sorted(maps.Keys(workspaces)) {
		ws := workspaces[id]
		if err := s.collectConsumers(ctx, ws, ch); err != nil {
			s.log.Warn("consumer metrics unavailable", "workspace", id, "error", err)
		}
		if err := s.collectQuotas(ctx, ws, ch); err != nil {
			s.log.Warn("quota metrics unavailable", "workspace", id, "error", err)
		}
	}
}

// collectConsumers reports the backlog of every durable consumer on the
// workspace's topic: the HTTP API's and those of NATS clients alike.
func (s *Server) collectConsumers(ctx context.Context, ws *workspace, ch chan<- prometheus.Metric) error {
	topic, err := s.opts.Store.JS.Stream(ctx, store.StreamName(ws.id))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // no topic yet (or any more): no consumers, nothing pending
	}
	if err != nil {
		return err
	}
	list := topic.ListConsumers(ctx)
	for info := range list.Info() {
		if info.Config.Durable == "" {
			continue // an ephemeral consumer's name is random: unbounded labels
		}
		conn := info.Config.Metadata[store.ConsumerMetadataConnection]
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(info.NumPending), ws.id, info.Name, conn)
		ch <- prometheus.MustNewConstMetric(ackPendingDesc, prometheus.GaugeValue, float64(info.NumAckPending), ws.id, info.Name, conn)
	}
	return list.Err()
}

// collectSharedRecords reports the use and the bound of each records
// bucket the pooled workspaces share (a pool replica's store opens them):
// what an alert compares before the bucket refuses new messages 507.
func (s *Server) collectSharedRecords(ctx context.Context, ch chan<- prometheus.Metric) error {
	if s.opts.Store == nil || !s.opts.Store.SharedBuckets() {
		return nil
	}
	usage, err := s.opts.Store.SharedRecordsUsage(ctx)
	for _, u := range usage {
		ch <- prometheus.MustNewConstMetric(sharedRecordsBytesDesc, prometheus.GaugeValue, float64(u.Bytes), u.Bucket)
		if u.MaxBytes > 0 {
			ch <- prometheus.MustNewConstMetric(sharedRecordsMaxBytesDesc, prometheus.GaugeValue, float64(u.MaxBytes), u.Bucket)
		}
	}
	return err
}

// collectQuotas reports the daily quota and today's use of every
// connection that has one.
func (s *Server) collectQuotas(ctx context.Context, ws *workspace, ch chan<- prometheus.Metric) error {
	cfg := ws.cfg.Load()
	var quoted []config.Connection
	for _, conn := range cfg.Connections {
		if effectiveLimits(cfg, conn).DailyQuota > 0 {
			quoted = append(quoted, conn)
		}
	}
	if len(quoted) == 0 {
		return nil
	}
	for _, conn := range quoted {
		u, err := ws.limiter.Usage(ctx, conn.Name)
		if err != nil {
			return err
		}
		ch <- prometheus.MustNewConstMetric(quotaDesc, prometheus.GaugeValue, float64(effectiveLimits(cfg, conn).DailyQuota), ws.id, conn.Name)
		ch <- prometheus.MustNewConstMetric(quotaUsedDesc, prometheus.GaugeValue, float64(u.Accepted), ws.id, conn.Name)
	}
	return nil
}

// effectiveLimits are the connection's limits as policy/rego/limits.rego
// decides them: its own when it sets any, else the workspace's defaults.
func effectiveLimits(cfg *config.Workspace, conn config.Connection) config.Limits {
	if conn.Limits != nil {
		return *conn.Limits
	}
	return cfg.Limits
}

// certificateCollector reports the expiry of the publish port's
// certificate in use.
type certificateCollector struct{ leaf func() *x509.Certificate }

// Describe implements prometheus.Collector.
func (c certificateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certExpiryDesc }

// Collect implements prometheus.Collector.
func (c certificateCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, float64(c.leaf().NotAfter.Unix()))
}

// ServeCertificate reports, as storybus_tls_certificate_expiry_timestamp_seconds,
// the expiry of the certificate leaf returns: the publish port's, read at
// every scrape so that a reloaded pair is reported at once. Call it once,
// when the server serves TLS.
func (s *Server) ServeCertificate(leaf func() *x509.Certificate) error {
	return s.metrics.Registry.Register(certificateCollector{leaf: leaf})
}
