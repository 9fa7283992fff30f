package dsort

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are dsort's Prometheus metrics, registered on the Registerer of
// MasterConfig.Metrics (the master's series) / WorkerConfig.Metrics (the
// worker's). A nil *metrics (no registry), or a nil series (the other
// role's), records nothing: every method is safe on nil.
//
//	gantry_dsort_bytes_read_total       input bytes a worker read while sorting
//	gantry_dsort_bytes_sorted_total     bytes a worker finished sorting into runs
//	gantry_dsort_bytes_shuffled_total   bytes a worker received from peers
//	gantry_dsort_bytes_written_total    bytes a worker wrote to partition.<n> files
//	gantry_dsort_phase_seconds          time in each worker phase (label phase)
//	gantry_dsort_job_phase_seconds      time the job spent in each master phase
//	gantry_dsort_rpc_errors_total       RPCs answered or sent with an error (labels side, method)
//	gantry_dsort_rejoins_total          worker processes that came back (master)
//	gantry_dsort_workers_lost_total     workers silent past LostAfter (master)
//	gantry_dsort_heartbeats_missed_total heartbeats a worker could not deliver
type metrics struct {
	bytesRead, bytesSorted, bytesShuffled, bytesWritten prometheus.Counter
	phase, jobPhase                                     *prometheus.HistogramVec
	rpcErrors                                           *prometheus.CounterVec
	rejoins, lost, heartbeatsMissed                     prometheus.Counter
}

// phaseBuckets span a tiny test job to an hour-long phase.
var phaseBuckets = prometheus.ExponentialBuckets(0.01, 4, 10)

// role says whose metrics newMetrics registers: a master's registry
// exports only the master's series (and the RPC errors both have), a
// worker's only the worker's, so that neither shows the other's at 0.
type role int

const (
	masterRole role = iota
	workerRole
)

// newMetrics registers r's metrics on reg (nil: none); the other role's
// stay nil and record nothing. Collectors an earlier master or worker of
// this process registered are reused, so several can share one registry.
func newMetrics(reg prometheus.Registerer, r role) *metrics {
	if reg == nil {
		return nil
	}
	counter := func(name, help string) prometheus.Counter {
		return register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
	}
	m := &metrics{rpcErrors: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gantry_dsort_rpc_errors_total",
		Help: "RPCs that failed, by side (server: answered with an error; client: sent and failed) and method."},
		[]string{"side", "method"}))}
	if r == masterRole {
		m.jobPhase = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gantry_dsort_job_phase_seconds",
			Help: "Time the job spent in each phase, as the master saw it.", Buckets: phaseBuckets}, []string{"phase"}))
		m.rejoins = counter("gantry_dsort_rejoins_total", "Worker processes that registered again after a crash.")
		m.lost = counter("gantry_dsort_workers_lost_total", "Times a worker stayed silent past the lost threshold.")
		return m
	}
	m.bytesRead = counter("gantry_dsort_bytes_read_total", "Input bytes read by workers while sorting.")
	m.bytesSorted = counter("gantry_dsort_bytes_sorted_total", "Bytes workers finished sorting into runs.")
	m.bytesShuffled = counter("gantry_dsort_bytes_shuffled_total", "Bytes workers received from their peers in the shuffle.")
	m.bytesWritten = counter("gantry_dsort_bytes_written_total", "Bytes workers wrote to partition files.")
	m.phase = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gantry_dsort_phase_seconds",
		Help: "Time a worker spent in each phase.", Buckets: phaseBuckets}, []string{"phase"}))
	m.heartbeatsMissed = counter("gantry_dsort_heartbeats_missed_total", "Heartbeats a worker could not deliver to the master.")
	return m
}

// register registers c on reg, or returns the collector already there.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic("dsort: register metrics: " + err.Error())
	}
	return c
}

func add(c prometheus.Counter, n int64) {
	if c != nil && n > 0 {
		c.Add(float64(n))
	}
}

func (m *metrics) read(n int64) {
	if m != nil {
		add(m.bytesRead, n)
	}
}

func (m *metrics) sorted(n int64) {
	if m != nil {
		add(m.bytesSorted, n)
	}
}

func (m *metrics) shuffled(n int64) {
	if m != nil {
		add(m.bytesShuffled, n)
	}
}

func (m *metrics) written(n int64) {
	if m != nil {
		add(m.bytesWritten, n)
	}
}

func (m *metrics) phaseDone(s State, d time.Duration) {
	if m != nil && m.phase != nil {
		m.phase.WithLabelValues(s.String()).Observe(d.Seconds())
	}
}

func (m *metrics) jobPhaseDone(p JobPhase, d time.Duration) {
	if m != nil && m.jobPhase != nil {
		m.jobPhase.WithLabelValues(p.String()).Observe(d.Seconds())
	}
}

func (m *metrics) rpcError(side, method string) {
	if m != nil {
		m.rpcErrors.WithLabelValues(side, method).Inc()
	}
}

func (m *metrics) rejoin() {
	if m != nil && m.rejoins != nil {
		m.rejoins.Inc()
	}
}

func (m *metrics) workerLost() {
	if m != nil && m.lost != nil {
		m.lost.Inc()
	}
}

func (m *metrics) heartbeatMissed() {
	if m != nil && m.heartbeatsMissed != nil {
		m.heartbeatsMissed.Inc()
	}
}
