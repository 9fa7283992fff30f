package reconcile

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/workspace"
)

// Metrics are the reconciler's and the singletons' Prometheus metrics,
// recorded where things happen (a claim, a provider call's return, a
// completion, a terminal error), not inferred from row changes, so an
// operation that starts and ends between two reads of the table is still
// counted, once, by the replica that ran it. A nil *Metrics records
// nothing. Its methods: any goroutine. The live package adds workspaces
// by status, hint lag and SSE clients.
//
//	gantry_ws_operations_started_total{type}          claims won
//	gantry_ws_operations_total{type,result}           operations ended: ok | error | timeout | superseded
//	gantry_ws_operation_duration_seconds{type,result} claim → end
//	gantry_ws_provider_calls_total{type,result}       provider calls: ok | error | unreachable
//	gantry_ws_provider_call_duration_seconds{type}    one provider call
//	gantry_ws_reconcile_tick_seconds                  one tick: the actionable query + dispatch
//	gantry_ws_reconcile_step_seconds                  one workspace's reconcile step
//	gantry_ws_leader                                  1 while this replica runs the singletons
//	gantry_ws_singleton_running{loop}                 1 while monitor / ttl runs here
type Metrics struct {
	opsStarted   *prometheus.CounterVec
	ops          *prometheus.CounterVec
	opDuration   *prometheus.HistogramVec
	calls        *prometheus.CounterVec
	callDuration *prometheus.HistogramVec
	tick         prometheus.Histogram
	step         prometheus.Histogram
	leader       prometheus.Gauge
	singleton    *prometheus.GaugeVec
}

// Operation results (the result label of gantry_ws_operations_total).
const (
	resultOK          = "ok"
	resultError       = "error"
	resultTimeout     = "timeout"
	resultUnreachable = "unreachable"
	// resultSuperseded: given up for a change of desired state (Superseded).
	resultSuperseded = "superseded"
)

// NewMetrics registers the metrics on reg; nil reg = nil Metrics (none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		return nil
	}
	opBuckets := prometheus.ExponentialBuckets(0.01, 2, 18) // 10 ms … 22 min
	m := &Metrics{
		opsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_ws_operations_started_total",
			Help: "Workspace operations claimed by this replica, by type."}, []string{"type"}),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_ws_operations_total",
			Help: "Workspace operations ended, by type and result (ok, error, timeout, superseded)."}, []string{"type", "result"}),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gantry_ws_operation_duration_seconds",
			Help: "Time from an operation's claim to its end.", Buckets: opBuckets}, []string{"type", "result"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_ws_provider_calls_total",
			Help: "Provider calls made for operations, by operation type and result (ok, error, unreachable)."}, []string{"type", "result"}),
		callDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gantry_ws_provider_call_duration_seconds",
			Help: "Duration of one provider call.", Buckets: opBuckets}, []string{"type"}),
		tick: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gantry_ws_reconcile_tick_seconds",
			Help: "Duration of one reconcile tick (the actionable query and the dispatch).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		step: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gantry_ws_reconcile_step_seconds",
			Help: "Duration of one workspace's reconcile step, provider call included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 22)}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gantry_ws_leader",
			Help: "1 while this replica holds the leader lock (always 1 on SQLite)."}),
		singleton: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gantry_ws_singleton_running",
			Help: "1 while the singleton loop runs in this replica (monitor, ttl)."}, []string{"loop"}),
	}
	reg.MustRegister(m.opsStarted, m.ops, m.opDuration, m.calls, m.callDuration, m.tick, m.step, m.leader, m.singleton)
	return m
}

func (m *Metrics) opStarted(op workspace.Operation) {
	if m != nil {
		m.opsStarted.WithLabelValues(string(op)).Inc()
	}
}

// opEnded counts an operation's end; started may be nil (unknown).
func (m *Metrics) opEnded(op workspace.Operation, result string, started *time.Time, now time.Time) {
	if m == nil {
		return
	}
	m.ops.WithLabelValues(string(op), result).Inc()
	if started != nil {
		m.opDuration.WithLabelValues(string(op), result).Observe(now.Sub(*started).Seconds())
	}
}

func (m *Metrics) providerCall(op workspace.Operation, err error, d time.Duration) {
	if m == nil {
		return
	}
	result := resultOK
	switch {
	case err != nil && workspace.FailureReason(err) == workspace.ReasonUnreachable:
		result = resultUnreachable
	case err != nil:
		result = resultError
	}
	m.calls.WithLabelValues(string(op), result).Inc()
	m.callDuration.WithLabelValues(string(op)).Observe(d.Seconds())
}

// observeTick and observeStep take the start time: `defer m.observeTick(time.Now())`.
func (m *Metrics) observeTick(t0 time.Time) {
	if m != nil {
		m.tick.Observe(time.Since(t0).Seconds())
	}
}

func (m *Metrics) observeStep(t0 time.Time) {
	if m != nil {
		m.step.Observe(time.Since(t0).Seconds())
	}
}

// SetLeader sets gantry_ws_leader.
func (m *Metrics) SetLeader(on bool) {
	if m != nil {
		m.leader.Set(b2f(on))
	}
}

// SetSingleton sets gantry_ws_singleton_running{loop}.
func (m *Metrics) SetSingleton(loop string, on bool) {
	if m != nil {
		m.singleton.WithLabelValues(loop).Set(b2f(on))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// terminalResult is the result label of an operation ended by info.
func terminalResult(info *workspace.ErrorInfo) string {
	if info.Reason == workspace.ReasonTimeout {
		return resultTimeout
	}
	return resultError
}

// OpCompleted counts op, claimed at started, as ended well at now (the
// monitor's observation that ends it: workspace.Decision.ObservationEnds).
func (m *Metrics) OpCompleted(op workspace.Operation, started *time.Time, now time.Time) {
	m.opEnded(op, resultOK, started, now)
}
