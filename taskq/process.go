package taskq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// panicError is a handler panic turned into an error. A panic is a bug that
// a retry will not fix, so the task goes straight to the dead-letter set.
type panicError struct {
	v     any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.v) }

type ackReq struct {
	queue string
	item  rdb.AckItem
}

// process runs one dequeued task to an outcome: ack, retry, dead letter or
// (on shutdown) requeue. handlerCtx ends when shutdown cancels handlers;
// persist outlives it so the outcome still reaches Redis.
func (w *Worker) process(handlerCtx, persist context.Context, d rdb.Dequeued) {
	if d.Redelivered {
		w.m.duplicates.WithLabelValues(d.Queue).Inc()
	}
	m, t, h, ok := w.prepare(persist, d)
	if !ok {
		return
	}
	maybe, fresh := w.freshLease(persist, &d)
	if !fresh {
		return
	}
	timeout := w.cfg.DefaultTimeout
	if m.TimeoutMS > 0 {
		timeout = time.Duration(m.TimeoutMS) * time.Millisecond
	}
	tctx, cancel := context.WithTimeout(handlerCtx, timeout)
	if m.DeadlineMS > 0 {
		var cancelTimeout context.CancelFunc = cancel
		tctx, cancel = context.WithDeadline(tctx, time.UnixMilli(m.DeadlineMS))
		defer cancelTimeout()
	}
	key := inflightKey{d.Queue, d.ID}
	it := &inflightTask{cancel: cancel}
	it.lease.Store(d.LeaseUntil.UnixMilli())
	it.held, it.maybe = d.LeaseUntil.UnixMilli(), maybe
	t.run = &runInfo{workerID: w.cfg.ID, host: w.host, starts: d.Starts, lease: &it.lease,
		progress: func(ctx context.Context, v string) error {
			ok, err := w.r.Progress(ctx, d.Queue, d.ID, v)
			if err == nil && !ok {
				err = ErrNotRunning
			}
			return err
		},
		results: func(ctx context.Context, ids []string) (map[string][]byte, error) {
			return w.r.Results(ctx, d.Queue, ids)
		}}
	if m.EnqueuedAt > 0 {
		t.run.enqueuedAt = time.UnixMilli(m.EnqueuedAt)
	}
	w.inflight.add(key, it) // before the handler: the lease keeper and canceller see it
	start := time.Now()
	err, abandoned := w.runHandler(tctx, h, t)
	cancel()
	w.inflight.remove(key, it)
	ran := time.Since(start)
	w.runTimes.add(ran)
	w.m.duration.WithLabelValues(d.Queue).Observe(ran.Seconds())

	w.outcome(handlerCtx, persist, d, m, t, it, err, abandoned, start)
}

// freshLease extends d's lease before its run when it waited in the buffer
// long enough to be near its end (the lease keeper extends running tasks
// only); false when the lease was lost meanwhile: the reaper gave the task
// back and another worker, or this one (a copy dequeued since, while this
// one waited), may run it, so this copy does not. The check is fenced on
// the lease end the dequeue set (extend.lua), not on the id alone. maybe
// is the end of an extend whose answer was lost (it may have applied).
func (w *Worker) freshLease(persist context.Context, d *rdb.Dequeued) (maybe []int64, ok bool) {
	now := w.clk.Now()
	if d.LeaseUntil.Sub(now) > w.cfg.HeartbeatInterval {
		return nil, true
	}
	until := now.Add(w.cfg.LeaseDuration)
	c, cancel := context.WithTimeout(persist, 5*time.Second)
	lost, err := w.r.Extend(c, d.Queue, until, []rdb.Lease{{ID: d.ID, Held: d.LeaseUntil.UnixMilli()}})
	cancel()
	switch {
	case err != nil:
		return []int64{until.UnixMilli()}, true // Redis is out: run it; the lease keeper finds out soon
	case len(lost) > 0:
		w.log.Warn("taskq: a task's lease ran out while it waited for a handler; left to its new holder", "queue", d.Queue, "id", d.ID)
		return nil, false
	}
	d.LeaseUntil = until
	return nil, true
}

// outcome reports how the run that began at start ended: cancelled or
// lost (nothing to report), requeued on shutdown, snoozed, succeeded or
// failed.
func (w *Worker) outcome(handlerCtx, persist context.Context, d rdb.Dequeued, m *message, t *Task, it *inflightTask, err error, abandoned bool, start time.Time) {
	switch {
	case it.cancelled.Load():
		// An operator cancelled it: Redis already holds it as cancelled.
		w.m.cancelled.WithLabelValues(d.Queue).Inc()
		w.log.Info("taskq: task cancelled while running", "queue", d.Queue, "id", d.ID, "ran", time.Since(start).Round(time.Millisecond))
	case it.lost.Load():
		// Another worker may be running it: whatever we report is moot.
		w.log.Warn("taskq: lease lost while running", "queue", d.Queue, "id", d.ID)
	case err != nil && handlerCtx.Err() != nil:
		// Shutdown cancelled it: give it back, not a failure.
		if err := w.retryPersist(persist, "requeue", func(c context.Context) error {
			_, err := w.r.Requeue(c, d.Queue, []string{d.ID})
			return err
		}); err == nil {
			w.m.requeued.WithLabelValues(d.Queue).Inc()
		}
	case errors.As(err, new(*SnoozeError)):
		w.snoozed(persist, d, err)
	case err == nil:
		w.succeeded(d, m, t)
		if w.log.Enabled(persist, slog.LevelDebug) {
			w.log.Debug("taskq: task completed", "queue", d.Queue, "id", d.ID, "type", m.Type, "tenant", m.Tenant, "ran", time.Since(start))
		}
	default:
		w.attemptFailed(persist, d, m, t, err, abandoned)
	}
}

// prepare decodes d's message and finds its handler; a task that cannot
// run (bad message, unknown type) goes to the dead letters and ok is false.
func (w *Worker) prepare(persist context.Context, d rdb.Dequeued) (m *message, t *Task, h HandlerFunc, ok bool) {
	m, err := decodeMessage(d.ID, d.Queue, d.Msg)
	if err != nil {
		w.m.invalid.WithLabelValues(d.Queue).Inc()
		w.log.Warn("taskq: invalid task sent to dead letters", "queue", d.Queue, "id", d.ID, "reason", err)
		w.bury(persist, d.Queue, d.ID, "", err.Error(), err.Error())
		return nil, nil, nil, false
	}
	if d.Tenant != "" {
		m.Tenant = d.Tenant // the member is the source; an old message's field is the fallback
	}
	t = &Task{Type: m.Type, Payload: m.Payload, Headers: m.Headers, id: m.ID, queue: m.Queue, tenant: m.Tenant, retried: d.Retried, max: m.MaxRetries,
		workflow: m.Workflow, parents: m.Parents, group: m.Group}
	if len(m.Batch) > 0 {
		if err := w.loadBatch(persist, d.Queue, t, m.Batch); err != nil {
			w.log.Warn("taskq: reading a batch's members", "queue", d.Queue, "id", d.ID, "err", err)
			_ = w.retryPersist(persist, "requeue", func(c context.Context) error { _, err := w.r.Requeue(c, d.Queue, []string{d.ID}); return err })
			return nil, nil, nil, false
		}
	}
	if m.EnqueuedAt > 0 && d.Retried == 0 {
		w.m.wait.WithLabelValues(d.Queue).Observe(time.Since(time.UnixMilli(m.EnqueuedAt)).Seconds())
	}
	h = w.handler(m.Type)
	if h == nil && !w.assigned[d.Queue] {
		// Stolen from a queue whose tasks need handlers this worker lacks:
		// not a bad task, the wrong worker. It goes back uncounted, and
		// the queue is no steal target for a while.
		w.log.Debug("taskq: a stolen task of a type without a handler here goes back", "queue", d.Queue, "id", d.ID, "type", m.Type)
		w.stealer.refuse(d.Queue)
		giveBack(persist, w.r, w.health, []rdb.Dequeued{d})
		return nil, nil, nil, false
	}
	if h == nil {
		w.m.invalid.WithLabelValues(d.Queue).Inc()
		reason := fmt.Sprintf("unknown task type %q", m.Type)
		w.bury(persist, d.Queue, d.ID, m.Tenant, reason, reason)
		w.failed.Add(1)
		w.callFailure(t, errors.New(reason), true)
		return nil, nil, nil, false
	}
	return m, t, h, true
}

// succeeded queues the ack (batched by ackLoop) with the result and its
// retention.
func (w *Worker) succeeded(d rdb.Dequeued, m *message, t *Task) {
	w.processed.Add(1)
	w.m.processed.WithLabelValues(d.Queue, m.Tenant, "success").Inc()
	var keep time.Time
	if m.RetentionMS > 0 {
		keep = w.clk.Now().Add(time.Duration(m.RetentionMS) * time.Millisecond)
	}
	w.ackCh <- ackReq{d.Queue, rdb.AckItem{ID: d.ID, KeepUntil: keep, Result: t.result}}
	if w.cfg.OnSuccess != nil {
		w.cfg.OnSuccess(t)
	}
}

// snoozed puts the task off for its handler's SnoozeError.For, counting
// no attempt.
func (w *Worker) snoozed(persist context.Context, d rdb.Dequeued, err error) {
	var sz *SnoozeError
	errors.As(err, &sz)
	now := w.clk.Now()
	if w.retryPersist(persist, "snooze", func(c context.Context) error {
		_, err := w.r.Snooze(c, d.Queue, d.ID, now, now.Add(sz.For))
		return err
	}) == nil {
		w.m.snoozed.WithLabelValues(d.Queue).Inc()
	}
}

// attemptFailed buries the task (a panic, SkipRetry, retries exhausted) or
// schedules its retry after the backoff scaled by the adaptive controller.
func (w *Worker) attemptFailed(persist context.Context, d rdb.Dequeued, m *message, t *Task, err error, abandoned bool) {
	w.processed.Add(1)
	w.failed.Add(1)
	w.m.processed.WithLabelValues(d.Queue, m.Tenant, "failure").Inc()
	var pe *panicError
	reason := ""
	switch {
	case errors.As(err, &pe):
		reason = pe.Error()
		w.log.Error("taskq: handler panicked", "queue", d.Queue, "id", d.ID, "type", m.Type, "panic", pe.v, "stack", string(pe.stack))
	case errors.Is(err, SkipRetry):
		reason = "handler asked to skip retry"
	case d.Retried >= m.MaxRetries:
		reason = fmt.Sprintf("retries exhausted (max %d)", m.MaxRetries)
	}
	if abandoned {
		w.m.abandoned.WithLabelValues(d.Queue).Inc()
	}
	if reason != "" {
		w.bury(persist, d.Queue, d.ID, m.Tenant, err.Error(), reason)
		w.callFailure(t, err, true)
		return
	}
	delay := w.retryDelay(m.Type, d.Retried, err) // retry.go
	now := w.clk.Now()
	_ = w.retryPersist(persist, "retry", func(c context.Context) error {
		_, err := w.r.Fail(c, d.Queue, d.ID, now, err.Error(), now.Add(delay), "")
		return err
	})
	w.m.retried.WithLabelValues(d.Queue).Inc()
	w.callFailure(t, err, false)
}

// runHandler runs h in its own goroutine so that a handler that ignores
// cancellation cannot hang the worker: after ctx ends it gets CancelGrace,
// then it is abandoned (left running, its task retried).
func (w *Worker) runHandler(ctx context.Context, h HandlerFunc, t *Task) (err error, abandoned bool) {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- &panicError{v: v, stack: debug.Stack()}
			}
		}()
		done <- h(ctx, t)
	}()
	select {
	case err := <-done:
		if err == nil && ctx.Err() == context.DeadlineExceeded {
			return nil, false // finished just in time
		}
		return err, false
	case <-ctx.Done():
	}
	grace := w.clk.NewTimer(w.cfg.CancelGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		if err == nil {
			err = ctx.Err()
		}
		return err, false
	case <-grace.C():
		return fmt.Errorf("abandoned: handler still running %s after %v", w.cfg.CancelGrace, context.Cause(ctx)), true
	}
}

func (w *Worker) callFailure(t *Task, err error, dead bool) {
	if w.cfg.OnFailure != nil {
		w.cfg.OnFailure(t, err, dead)
	}
}

// bury moves a held task to the dead-letter set.
func (w *Worker) bury(persist context.Context, queue, id, tenant, lastErr, reason string) {
	if err := w.retryPersist(persist, "dead-letter", func(c context.Context) error {
		_, err := w.r.Fail(c, queue, id, w.clk.Now(), lastErr, time.Time{}, reason)
		return err
	}); err == nil {
		w.m.dead.WithLabelValues(queue).Inc()
	}
}

// retryPersist retries a Redis write through an outage until persist ends.
func (w *Worker) retryPersist(persist context.Context, what string, fn func(context.Context) error) error {
	return retryRedis(persist, w.health, what, func(c context.Context) error {
		c, cancel := context.WithTimeout(c, 5*time.Second)
		defer cancel()
		return fn(c)
	})
}

// ackLoop batches acknowledgements: one script call per queue for whatever
// has accumulated while the previous call was in flight. It returns when
// ackCh is closed and drained.
func (w *Worker) ackLoop(persist context.Context) {
	byQueue := map[string][]rdb.AckItem{}
	for req := range w.ackCh {
		byQueue[req.queue] = append(byQueue[req.queue], req.item)
	more:
		for n := 1; n < 1024; n++ {
			select {
			case r, ok := <-w.ackCh:
				if !ok {
					break more
				}
				byQueue[r.queue] = append(byQueue[r.queue], r.item)
			default:
				break more
			}
		}
		for q, items := range byQueue {
			_ = w.retryPersist(persist, "ack", func(c context.Context) error {
				_, err := w.r.Ack(c, q, w.clk.Now(), items)
				return err
			})
			delete(byQueue, q)
		}
	}
}
