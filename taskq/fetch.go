package taskq

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/backoff"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// fetchLoop takes tasks for free slots, one dequeue call per batch over all
// eligible queues, and blocks on the wake-up lists when there is nothing.
// It requeues what it could not hand over when ctx ends.
func (w *Worker) fetchLoop(ctx, persist context.Context, tasks chan<- rdb.Dequeued, slots chan struct{}) {
	fails := 0
	for {
		select {
		case <-slots:
		case <-ctx.Done():
			return
		}
		n := 1
	grab:
		for n < w.cfg.BatchSize {
			select {
			case <-slots:
				n++
			default:
				break grab
			}
		}
		order, nAssigned := w.order()
		if ctx.Err() != nil {
			return
		}
		// The call must not be cut short by shutdown: the script may already
		// have leased the tasks, which would then wait for their lease to expire.
		now := time.Now()
		dctx, cancel := context.WithTimeout(persist, 10*time.Second)
		ds, err := w.r.Dequeue(dctx, order, n, now, now.Add(w.cfg.LeaseDuration))
		cancel()
		w.m.dequeues.Inc()
		for range n - len(ds) {
			slots <- struct{}{}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.redisError(&fails, "dequeue", err)
			if backoff.Sleep(ctx, w.cfg.RedisBackoff.Delay(fails-1)) != nil {
				return
			}
			continue
		}
		w.redisOK(&fails)
		for i, d := range ds {
			if !w.assigned[d.Queue] {
				w.noteSteal(d.Queue)
			}
			select {
			case tasks <- d:
			case <-ctx.Done():
				w.giveBack(persist, ds[i:])
				return
			}
		}
		if len(ds) > 0 {
			continue
		}
		if len(order) > nAssigned {
			w.noteStealMiss()
		}
		if _, err := w.r.WaitWake(ctx, order, w.cfg.IdleWait); err != nil && ctx.Err() == nil {
			w.redisError(&fails, "wait", err)
			if backoff.Sleep(ctx, w.cfg.RedisBackoff.Delay(fails-1)) != nil {
				return
			}
		}
	}
}

func (w *Worker) redisError(fails *int, op string, err error) {
	*fails++
	w.m.redisErrors.Inc()
	w.redisErrs.Add(1)
	if *fails == 1 || *fails%20 == 0 {
		w.log.Warn("taskq: redis unavailable, backing off", "op", op, "failures", *fails, "err", err)
	}
	w.redisDown.Store(true)
}

func (w *Worker) redisOK(fails *int) {
	if *fails > 0 {
		w.log.Info("taskq: redis reachable again, resuming", "after_failures", *fails)
	}
	*fails = 0
	w.redisDown.Store(false)
}

func (w *Worker) giveBack(persist context.Context, ds []rdb.Dequeued) {
	for _, d := range ds {
		_ = w.retryPersist(persist, "requeue", func(c context.Context) error {
			_, err := w.r.Requeue(c, d.Queue, []string{d.ID})
			return err
		})
	}
}

// order returns the queues for one dequeue call and how many of them are
// assigned: assigned queues first (strict order, or a weighted random order
// drawn per call), then steal targets by backlog. Because one script serves
// them in this order, a task is never stolen while an assigned queue, of any
// priority, has work.
func (w *Worker) order() ([]string, int) {
	qs := w.cfg.Queues
	out := make([]string, 0, len(qs)+4)
	if w.cfg.Strict || len(qs) == 1 {
		for _, q := range qs {
			out = append(out, q.Name)
		}
	} else {
		total := 0
		for _, q := range qs {
			total += q.Weight
		}
		used := make([]bool, len(qs))
		for range qs {
			x := rand.IntN(total)
			for i, q := range qs {
				if used[i] {
					continue
				}
				if x < q.Weight {
					used[i] = true
					total -= q.Weight
					out = append(out, q.Name)
					break
				}
				x -= q.Weight
			}
		}
	}
	n := len(out)
	w.smu.Lock()
	out = append(out, w.stealTargets...)
	w.smu.Unlock()
	return out, n
}

func (w *Worker) noteSteal(q string) {
	w.steals.Add(1)
	w.m.steals.WithLabelValues(q).Inc()
	w.smu.Lock()
	w.lastStolen = q
	w.stealMisses = 0
	w.smu.Unlock()
}

func (w *Worker) noteStealMiss() {
	w.smu.Lock()
	w.stealMisses++
	w.smu.Unlock()
	w.m.stealMisses.Inc()
}

// stealLoop refreshes the steal targets: the other known queues with a
// backlog, most loaded first, the one stolen from last moved to the end so
// that several idle workers do not all drain the same queue.
func (w *Worker) stealLoop(ctx context.Context) {
	for {
		w.refreshStealTargets(ctx)
		if backoff.Sleep(ctx, time.Duration(w.stealEvery.Load())) != nil {
			return
		}
	}
}

func (w *Worker) refreshStealTargets(ctx context.Context) {
	all, err := w.r.Queues(ctx)
	if err != nil {
		return
	}
	var others []string
	for _, q := range all {
		if !w.assigned[q] {
			others = append(others, q)
		}
	}
	var targets []string
	if len(others) > 0 {
		sizes, err := w.r.Sizes(ctx, others)
		if err != nil {
			return
		}
		for _, q := range others {
			if sizes[q] > 0 {
				targets = append(targets, q)
			}
		}
		w.smu.Lock()
		last := w.lastStolen
		w.smu.Unlock()
		sort.SliceStable(targets, func(i, j int) bool {
			if (targets[i] == last) != (targets[j] == last) {
				return targets[j] == last
			}
			return sizes[targets[i]] > sizes[targets[j]]
		})
	}
	w.smu.Lock()
	w.stealTargets = targets
	w.smu.Unlock()
}

// heartbeatLoop extends the leases of running tasks and rewrites the
// worker's record; a task whose lease was lost is cancelled.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		byQueue := map[string][]string{}
		w.mu.Lock()
		for k := range w.inflight {
			byQueue[k.queue] = append(byQueue[k.queue], k.id)
		}
		w.mu.Unlock()
		until := time.Now().Add(w.cfg.LeaseDuration)
		for q, ids := range byQueue {
			lost, err := w.r.Extend(ctx, q, until, ids)
			if err != nil {
				continue // the lease runs on; the next beat tries again
			}
			for _, id := range lost {
				w.mu.Lock()
				if it := w.inflight[inflightKey{q, id}]; it != nil {
					it.lost.Store(true)
					it.cancel()
				}
				w.mu.Unlock()
			}
		}
	}
}

// maintainLoop reaps expired leases, promotes due tasks and applies
// retention on the assigned queues and the steal targets.
func (w *Worker) maintainLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.MaintainInterval)
	defer t.Stop()
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if tick%5 == 0 { // every 5 s by default: an idle worker stays cheap
			w.writeRecord(ctx)
			w.refreshGauges(ctx)
		}
		if tick%60 == 0 {
			w.pruneRecords(ctx)
		}
		qs := w.queueNames()
		if !w.cfg.DisableSteal {
			if all, err := w.r.Queues(ctx); err == nil {
				qs = all
			}
		}
		now := time.Now()
		for _, q := range qs {
			res, err := w.r.Maintain(ctx, q, now, 1000, now.Add(-w.cfg.DeadRetention), w.cfg.DeadMax)
			if err != nil {
				break
			}
			if res.Reaped > 0 {
				w.m.reaped.WithLabelValues(q).Add(float64(res.Reaped))
				w.log.Info("taskq: took back tasks whose lease expired", "queue", q, "tasks", res.Reaped)
			}
		}
	}
}

// recordTTL is how long a worker record outlives its last heartbeat (a
// stopped worker, or one that crashed) before any worker deletes it.
const recordTTL = time.Hour

func (w *Worker) pruneRecords(ctx context.Context) {
	recs, err := w.r.Workers(ctx)
	if err != nil {
		return
	}
	for id, v := range recs {
		var rec WorkerRecord
		if json.Unmarshal([]byte(v), &rec) != nil || time.Since(rec.Heartbeat) > recordTTL {
			w.r.DeleteWorker(ctx, id)
		}
	}
}

// refreshGauges sets the queue-size gauges of the assigned queues (per state
// and per tenant) from Redis.
func (w *Worker) refreshGauges(ctx context.Context) {
	for _, q := range w.queueNames() {
		st, err := w.r.Stats(ctx, q)
		if err != nil {
			return
		}
		for state, n := range map[string]int64{"pending": st.Pending, "active": st.Active, "scheduled": st.Scheduled,
			"retry": st.Retry, "dead": st.Dead} {
			w.m.queueSize.WithLabelValues(q, state).Set(float64(n))
		}
		for t, ts := range st.Tenants {
			w.m.tenantSize.WithLabelValues(q, t).Set(float64(ts.Pending))
		}
	}
}
