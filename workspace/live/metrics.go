package live

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/workspace"
)

// metrics are what the event hub sees: hint lag and SSE clients (plus
// workspaces by status, from its snapshot). Operations are counted at their
// source, by the reconciler (reconcile.Metrics), not inferred here from row
// changes, which would miss an operation that starts and ends between two
// reads.
type metrics struct {
	hintLag    prometheus.Histogram // row commit → hub read after a hint
	sseClients prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry) *metrics {
	if reg == nil {
		return &metrics{}
	}
	m := &metrics{
		hintLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gantry_ws_hint_lag_seconds",
			Help: "Time from a row's commit to the event hub reading it after a hint.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		sseClients: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gantry_ws_sse_clients", Help: "Open SSE streams."}),
	}
	reg.MustRegister(m.hintLag, m.sseClients)
	return m
}

func (m *metrics) observeHintLag(d time.Duration) {
	if m.hintLag != nil && d >= 0 {
		m.hintLag.Observe(d.Seconds())
	}
}

// statusCollector reports workspaces by observed status from the hub.
type statusCollector struct{ hub *Hub }

var statusDesc = prometheus.NewDesc("gantry_ws_workspaces", "Workspaces by observed status.", []string{"status"}, nil)

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) { ch <- statusDesc }

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[workspace.Status]int{workspace.Pending: 0, workspace.Standby: 0, workspace.Running: 0, workspace.Error: 0}
	for _, w := range c.hub.Snapshot() {
		counts[w.ObservedStatus]++
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(statusDesc, prometheus.GaugeValue, float64(n), string(st))
	}
}
