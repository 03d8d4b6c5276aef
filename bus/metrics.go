package bus

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/storybus/storybus/internal/buildinfo"
)

// Metrics are the bus's Prometheus metrics.
type Metrics struct {
	Registry  *prometheus.Registry
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	storeOps  *prometheus.HistogramVec
	policyErr *prometheus.CounterVec
	reloads   *prometheus.CounterVec
	// api counts the other routes' answers: tokens, pulls and acks.
	api       *prometheus.CounterVec
	delivered *prometheus.CounterVec
	acked     *prometheus.CounterVec
	held      prometheus.Gauge
	// collectors are those NewMetrics registers.
	collectors []prometheus.Collector
	// answers and stores keep the series of requests and store operations
	// by their labels (answerLabels, storeLabels): a publish looks its
	// series up in a map instead of hashing their labels every time.
	answers, stores sync.Map
}

type answerLabels struct{ workspace, status, rule string }

type answerSeries struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

type storeLabels struct{ workspace, op string }

// NewMetrics registers the bus's metrics, with storybus_build_info and the
// Go and process collectors, on a fresh registry. A Metrics serves one
// Server, which adds its state metrics (metrics_state.go) to it.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "storybus_publish_requests_total",
			Help: "Publish API requests by workspace, HTTP status and rule (empty when accepted).",
		}, []string{"workspace", "status", "rule"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "storybus_publish_duration_seconds",
			Help:    "Time to answer a publish request, by workspace and HTTP status.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"workspace", "status"}),
		storeOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "storybus_store_operation_duration_seconds",
			Help:    "Latency of JetStream operations by operation.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .5, 1},
		}, []string{"workspace", "op"}),
		policyErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "storybus_config_reload_errors_total",
			Help: "Workspace configurations or policies that failed to load; the previous one stays in force.",
		}, []string{"workspace"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "storybus_config_reloads_total",
			Help: "Workspace configurations (or TLS key pairs, by file) loaded and put in force after a change.",
		}, []string{"workspace"}),
		api: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "storybus_api_requests_total",
			Help: "Token, consumer pull and ack requests by workspace, route, HTTP status and rule (empty when answered 200).",
		}, []string{"workspace", "route", "status", "rule"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "storybus_consumer_delivered_messages_total",
			Help: "Messages handed to consumers by the pull route, redeliveries included, by workspace and connection.",
		}, []string{"workspace", "connection"}),
		acked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "storybus_consumer_acked_messages_total",
			Help: "Deliveries answered through the ack route, by workspace, connection and action (ack, nak, in_progress, term).",
		}, []string{"workspace", "connection", "action"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "storybus_refusals_held",
			Help: "Over-share refusals (rate.limited, workspace.busy, policy.busy) being held before they are answered (--refusal-hold).",
		}),
	}
	m.collectors = []prometheus.Collector{m.requests, m.latency, m.storeOps, m.policyErr, m.reloads, m.api, m.delivered, m.acked, m.held,
		buildinfo.NewCollector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	m.Registry.MustRegister(m.collectors...)
	return m
}

// DescribeAll sends the descriptor of every metric a Server with these
// Metrics may serve, whether or not it holds a series yet: those of
// NewMetrics, the state metrics and the TLS certificate's. Alerts and
// dashboards are checked against them.
func (m *Metrics) DescribeAll(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
	stateCollector{}.Describe(ch)
	certificateCollector{}.Describe(ch)
}

func (m *Metrics) observeRequest(workspace, status, rule string, d time.Duration) {
	key := answerLabels{workspace, status, rule}
	v, ok := m.answers.Load(key)
	if !ok {
		v, _ = m.answers.LoadOrStore(key, answerSeries{
			requests: m.requests.WithLabelValues(workspace, status, rule),
			latency:  m.latency.WithLabelValues(workspace, status),
		})
	}
	series := v.(answerSeries)
	series.requests.Inc()
	series.latency.Observe(d.Seconds())
}

func (m *Metrics) observeAPI(route string) func(workspace, status, rule string, d time.Duration) {
	return func(workspace, status, rule string, _ time.Duration) {
		m.api.WithLabelValues(workspace, route, status, rule).Inc()
	}
}

func (m *Metrics) storeObserver(workspace string) func(string, time.Duration) {
	return func(op string, d time.Duration) {
		key := storeLabels{workspace, op}
		v, ok := m.stores.Load(key)
		if !ok {
			v, _ = m.stores.LoadOrStore(key, m.storeOps.WithLabelValues(workspace, op))
		}
		v.(prometheus.Observer).Observe(d.Seconds())
	}
}
