package taskq

import "github.com/prometheus/client_golang/prometheus"

// metrics are the worker's Prometheus collectors. With a nil registry they
// exist but are not registered, so the code never checks for nil.
type metrics struct {
	processed   *prometheus.CounterVec // queue, tenant, outcome
	duration    *prometheus.HistogramVec
	wait        *prometheus.HistogramVec
	retried     *prometheus.CounterVec
	snoozed     *prometheus.CounterVec
	dead        *prometheus.CounterVec
	invalid     *prometheus.CounterVec
	duplicates  *prometheus.CounterVec
	abandoned   *prometheus.CounterVec
	requeued    *prometheus.CounterVec
	cancelled   *prometheus.CounterVec
	reaped      *prometheus.CounterVec
	steals      *prometheus.CounterVec
	stealMisses prometheus.Counter
	dequeues    prometheus.Counter
	// emptyDequeues counts dequeue calls that found nothing; idle is 1
	// while the fetcher blocks on the wake lists, idleSeconds sums that time.
	emptyDequeues prometheus.Counter
	idle          prometheus.Gauge
	idleSeconds   prometheus.Counter
	redisErrors   prometheus.Counter
	retryScale    prometheus.Gauge
	// the adaptive controller's knobs and its changes
	adaptive     *prometheus.GaugeVec   // setting
	queueWeight  *prometheus.GaugeVec   // queue
	adaptChanges *prometheus.CounterVec // action, kind (change, revert)
	queueSize    *prometheus.GaugeVec   // queue, state
	tenantSize   *prometheus.GaugeVec   // queue, tenant
}

func newMetrics(reg prometheus.Registerer) *metrics {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskq_" + name, Help: help}, labels)
	}
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	m := &metrics{
		processed:     cv("tasks_processed_total", "Attempts that ended, by queue, tenant and outcome (success, failure).", "queue", "tenant", "outcome"),
		duration:      prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskq_task_duration_seconds", Help: "Handler run time.", Buckets: buckets}, []string{"queue"}),
		wait:          prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "taskq_task_wait_seconds", Help: "Enqueue to first start (queue latency).", Buckets: buckets}, []string{"queue"}),
		retried:       cv("tasks_retried_total", "Failed attempts scheduled for retry.", "queue"),
		snoozed:       cv("tasks_snoozed_total", "Attempts whose handler snoozed the task (Snooze: not counted as attempts).", "queue"),
		dead:          cv("tasks_dead_total", "Tasks moved to the dead-letter set.", "queue"),
		invalid:       cv("tasks_invalid_total", "Malformed tasks or unknown types (dead-lettered).", "queue"),
		duplicates:    cv("tasks_duplicate_total", "Re-deliveries after a lost lease (at-least-once duplicates).", "queue"),
		abandoned:     cv("tasks_abandoned_total", "Handlers that ignored cancellation past the grace period.", "queue"),
		requeued:      cv("tasks_requeued_total", "Tasks given back on shutdown.", "queue"),
		cancelled:     cv("tasks_cancelled_total", "Running tasks whose handler this worker cancelled on an operator's cancel.", "queue"),
		reaped:        cv("leases_expired_total", "Tasks taken back after their lease expired.", "queue"),
		steals:        cv("steals_total", "Tasks taken from queues the worker is not assigned to, by source queue.", "queue"),
		stealMisses:   prometheus.NewCounter(prometheus.CounterOpts{Name: "taskq_steal_misses_total", Help: "Dequeues that found steal targets but no task (contention)."}),
		dequeues:      prometheus.NewCounter(prometheus.CounterOpts{Name: "taskq_dequeue_calls_total", Help: "Dequeue script calls."}),
		emptyDequeues: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskq_empty_dequeues_total", Help: "Dequeue calls that found no task (then the worker blocks on the wake lists)."}),
		idle:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskq_idle", Help: "1 while the worker waits for work on its wake lists."}),
		idleSeconds:   prometheus.NewCounter(prometheus.CounterOpts{Name: "taskq_idle_seconds_total", Help: "Time spent waiting for work on the wake lists."}),
		redisErrors:   prometheus.NewCounter(prometheus.CounterOpts{Name: "taskq_redis_errors_total", Help: "Failed Redis calls."}),
		retryScale:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskq_retry_delay_scale", Help: "Adaptive factor applied to retry delays."}),
		adaptive: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskq_adaptive_setting",
			Help: "The adaptive controller's settings: retry_scale, poll_delay_seconds, idle_wait_seconds, steal_interval_seconds."}, []string{"setting"}),
		queueWeight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskq_adaptive_queue_weight",
			Help: "The adaptive factor on each assigned queue's weight (1: as configured)."}, []string{"queue"}),
		adaptChanges: cv("adaptive_changes_total", "Adaptive controller changes (kind=change) and reverts of changes that made their figure worse (kind=revert).", "action", "kind"),
		queueSize:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskq_queue_size", Help: "Tasks per queue and state."}, []string{"queue", "state"}),
		tenantSize:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskq_tenant_pending", Help: "Pending tasks per queue and tenant."}, []string{"queue", "tenant"}),
	}
	for _, a := range []string{actRetry, actPoll, actIdleWait, actPriority, actStealEvery, actRebalance} {
		m.adaptChanges.WithLabelValues(a, "change")
		m.adaptChanges.WithLabelValues(a, "revert")
	}
	if reg != nil {
		reg.MustRegister(m.processed, m.duration, m.wait, m.retried, m.snoozed, m.dead, m.invalid, m.duplicates, m.abandoned,
			m.requeued, m.cancelled, m.reaped, m.steals, m.stealMisses, m.dequeues, m.emptyDequeues, m.idle, m.idleSeconds, m.redisErrors, m.retryScale, m.adaptive, m.queueWeight, m.adaptChanges, m.queueSize, m.tenantSize)
	}
	return m
}

// initQueues makes the per-queue series of queues exist at 0, so a scrape
// shows them (and a rate over them is defined) before the first event.
func (m *metrics) initQueues(queues []string) {
	for _, q := range queues {
		for _, v := range []*prometheus.CounterVec{m.retried, m.snoozed, m.dead, m.invalid, m.duplicates, m.abandoned, m.requeued, m.cancelled, m.reaped, m.steals} {
			v.WithLabelValues(q)
		}
		m.duration.WithLabelValues(q)
		m.wait.WithLabelValues(q)
	}
}
