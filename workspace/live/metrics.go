package live

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/workspace"
)

// metrics are derived from the committed rows the hub sees, so they count
// what the database says happened, on whichever replica serves /metrics.
// Limitation: an operation that is claimed and finished between two reads
// of the hub (no hint, shorter than a resync) is not counted; the
// reconciler's own loop-latency and per-call metrics need a hook in it.
type metrics struct {
	ops        *prometheus.CounterVec   // operations finished, by type and result
	opDuration *prometheus.HistogramVec // op_started_at → operation NONE
	hintLag    prometheus.Histogram     // row commit → hub read after a hint
	sseClients prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry) *metrics {
	if reg == nil {
		return &metrics{}
	}
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_ws_operations_total",
			Help: "Workspace operations finished, by type and result (ok, error)."}, []string{"type", "result"}),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gantry_ws_operation_duration_seconds",
			Help: "Time from an operation's claim to its completion.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 16)}, []string{"type"}),
		hintLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gantry_ws_hint_lag_seconds",
			Help: "Time from a row's commit to the event hub reading it after a hint.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		sseClients: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gantry_ws_sse_clients", Help: "Open SSE streams."}),
	}
	reg.MustRegister(m.ops, m.opDuration, m.hintLag, m.sseClients)
	return m
}

func (m *metrics) observeHintLag(d time.Duration) {
	if m.hintLag != nil && d >= 0 {
		m.hintLag.Observe(d.Seconds())
	}
}

// observeEvent counts an operation as finished when a row's operation goes
// from X to NONE; an error_count increase (or error_info) means "error".
func (m *metrics) observeEvent(old, cur workspace.Workspace, now time.Time) {
	if m.ops == nil || old.Operation == "" || old.Operation == workspace.OpNone || cur.Operation == old.Operation {
		return
	}
	result := "ok"
	if cur.ErrorCount > old.ErrorCount || cur.ErrorInfo != nil {
		result = "error"
	}
	m.ops.WithLabelValues(string(old.Operation), result).Inc()
	if old.OpStartedAt != nil {
		m.opDuration.WithLabelValues(string(old.Operation)).Observe(now.Sub(*old.OpStartedAt).Seconds())
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
