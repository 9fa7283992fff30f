package taskq

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// maintainerParams configure a maintainer.
type maintainerParams struct {
	r             *rdb.RDB
	queues        []string // the assigned queues
	allQueues     bool     // maintain every known queue (stealing is on)
	interval      time.Duration
	deadRetention time.Duration
	deadMax       int
	clock         clock.Clock
	m             *metrics
	log           logger
	// writeRecord rewrites the worker's record (every 5th tick).
	writeRecord func(ctx context.Context)
}

// maintainer reaps expired leases, promotes due (scheduled and retry)
// tasks and applies the dead-letter retention, every interval, on the
// assigned queues (and every known queue when the worker steals); every
// 5th tick it rewrites the worker record and the queue gauges, every 60th
// it prunes records of workers gone for recordTTL.
type maintainer struct {
	p maintainerParams
	loop
	// sizes is the pending count per assigned queue of the last gauge
	// refresh; refreshGauges Stores a fresh map, backlog Loads.
	sizes atomic.Pointer[map[string]int64]
	// tracking is, per queue, where the scan that makes its set of tasks
	// with extra fields complete (rdb.TrackExtras) goes on from (absent:
	// the start; Done once complete); run's goroutine only.
	tracking map[string]rdb.ScanPos
}

func newMaintainer(p maintainerParams) *maintainer {
	return &maintainer{p: p, tracking: map[string]rdb.ScanPos{}}
}

// recordTTL is how long a worker record outlives its last heartbeat (a
// stopped worker, or one that crashed) before any worker deletes it.
const recordTTL = time.Hour

func (m *maintainer) run(ctx context.Context) {
	tick := 0
	tickLoop(ctx, m.p.clock, m.p.interval, func() bool {
		if tick%5 == 0 { // every 5 s by default: an idle worker stays cheap
			m.p.writeRecord(ctx)
			m.refreshGauges(ctx)
		}
		if tick%60 == 0 {
			m.pruneRecords(ctx)
		}
		m.maintain(ctx)
		tick++
		return true
	})
}

// start runs the maintainer until stop or until ctx ends.
func (m *maintainer) start(ctx context.Context) { m.launch(ctx, m.run) }

// maintain runs the maintenance script once per queue, after making a
// queue an earlier release wrote track its tasks' extra fields (once).
func (m *maintainer) maintain(ctx context.Context) {
	qs := m.p.queues
	if m.p.allQueues {
		if all, err := m.p.r.Queues(ctx); err == nil {
			qs = all
		}
	}
	now := m.p.clock.Now()
	for _, q := range qs {
		m.track(ctx, q)
		res, err := m.p.r.Maintain(ctx, q, now, 1000, now.Add(-m.p.deadRetention), m.p.deadMax)
		if err != nil {
			return
		}
		if res.Reaped > 0 {
			m.p.m.reaped.WithLabelValues(q).Add(float64(res.Reaped))
			m.p.log.Info("taskq: took back tasks whose lease expired", "queue", q, "tasks", res.Reaped)
		}
	}
}

// trackSteps bounds the scan of one queue in one tick (about 100,000 of
// its fields), so that a large queue an earlier release wrote never holds
// up the maintenance of the others.
const trackSteps = 100

// track goes on with q's scan until its set of tasks with extra fields is
// complete (once per queue and worker; a tracked queue costs one call).
func (m *maintainer) track(ctx context.Context, q string) {
	pos := m.tracking[q]
	if pos.Done() {
		return
	}
	if next, err := m.p.r.TrackExtras(ctx, q, pos, trackSteps); err == nil {
		m.tracking[q] = next
	}
}

func (m *maintainer) pruneRecords(ctx context.Context) {
	recs, err := m.p.r.Workers(ctx)
	if err != nil {
		return
	}
	now := m.p.clock.Now()
	for id, v := range recs {
		var rec WorkerRecord
		if json.Unmarshal([]byte(v), &rec) != nil || now.Sub(rec.Heartbeat) > recordTTL {
			m.p.r.DeleteWorker(ctx, id)
		}
	}
}

// backlog is the pending count of each assigned queue as last measured
// (empty before the first measurement). Any goroutine.
func (m *maintainer) backlog() map[string]int64 {
	if p := m.sizes.Load(); p != nil {
		return *p
	}
	return map[string]int64{}
}

// refreshGauges sets the queue-size gauges of the assigned queues (per state
// and per tenant) from Redis.
func (m *maintainer) refreshGauges(ctx context.Context) {
	backlog := make(map[string]int64, len(m.p.queues))
	defer func() { m.sizes.Store(&backlog) }()
	for _, q := range m.p.queues {
		st, err := m.p.r.Stats(ctx, q)
		if err != nil {
			return
		}
		backlog[q] = st.Pending
		for state, n := range map[string]int64{"pending": st.Pending, "active": st.Active, "scheduled": st.Scheduled,
			"retry": st.Retry, "dead": st.Dead, "cancelled": st.Cancelled} {
			m.p.m.queueSize.WithLabelValues(q, state).Set(float64(n))
		}
		for t, ts := range st.Tenants {
			m.p.m.tenantSize.WithLabelValues(q, t).Set(float64(ts.Pending))
		}
	}
}
