package taskq

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// loop is the start/stop shape the background components (fetcher,
// stealer, lease keeper, maintainer, adaptive controller) share, in the
// manner of asynq's janitor and heartbeater: each has newX(params) *x,
// x.start(ctx), which runs its loop in a goroutine under a context of its
// own, and x.stop(), which cancels that context and waits for the loop to
// return.
//
// Lifecycle: idle --start--> running --stop--> stopped. stop is safe twice
// and before start; a start after stop does nothing, so a worker that
// stops a component it never started cannot leak it.
type loop struct {
	// mu protects the fields below; start and stop may race from any goroutine.
	mu      sync.Mutex
	cancel  context.CancelFunc // nil until started
	done    chan struct{}      // closed when the loop returned; nil until started
	stopped bool               // stop was called: start does nothing
}

// launch runs fn(ctx') in a goroutine, ctx' ending at stop or with ctx.
// A second launch, or a launch after stop, does nothing.
func (l *loop) launch(ctx context.Context, fn func(context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil || l.stopped {
		return
	}
	ctx, l.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	l.done = done
	go func() {
		defer close(done)
		fn(ctx)
	}()
}

// stop cancels the loop and waits for it to return.
func (l *loop) stop() {
	l.mu.Lock()
	l.stopped = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// tickLoop calls fn at each tick of a ticker of period d on clk (the first a
// period from now) until ctx ends or fn returns false: the loop of the
// background components.
func tickLoop(ctx context.Context, clk clock.Clock, d time.Duration, fn func() bool) {
	t := clk.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if !fn() {
			return
		}
	}
}

// sleep waits d on clk, or until ctx ends (then it returns ctx.Err()).
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// redisHealth counts failed Redis calls and logs an outage once, its
// recovery once, and every 20th failure in between. Any goroutine.
type redisHealth struct {
	// Set at construction, read-only afterwards.
	log     logger
	metric  prometheus.Counter
	clock   clock.Clock
	backoff backoff.Policy

	// errs counts failed calls so far; any goroutine Adds and Loads
	// (sequentially consistent; a counter, no other memory hangs on it).
	errs atomic.Int64
	// since is when the current outage began (clock's Unix ms; 0: Redis
	// answered the last call). Any goroutine.
	since atomic.Int64
}

// outage records a failed call at now (the first opens an outage).
func (h *redisHealth) outage() { h.since.CompareAndSwap(0, h.clock.Now().UnixMilli()) }

// answered records a call Redis answered: the outage, if any, is over.
func (h *redisHealth) answered() { h.since.Store(0) }

// failure records a failed call: an outage, unless Redis answered LOADING.
func (h *redisHealth) failure(err error) {
	if rdb.IsLoading(err) {
		h.loading()
		return
	}
	h.outage()
}

// loading records a LOADING reply: Redis is up and reading its dataset
// back, a transient state the calls wait out (internal/rdb), so an outage,
// if any, is over and RedisLostAfter does not count the load.
func (h *redisHealth) loading() {
	if h.since.Swap(0) != 0 {
		h.log.Info("taskq: redis is back and loading its dataset; waiting for it")
	}
}

// down reports whether an outage is open (the last call failed).
func (h *redisHealth) down() bool { return h.since.Load() != 0 }

// downFor is how long Redis has been unreachable at now (0: it answers).
func (h *redisHealth) downFor(now time.Time) time.Duration {
	s := h.since.Load()
	if s == 0 {
		return 0
	}
	return now.Sub(time.UnixMilli(s))
}

// logger is the part of *slog.Logger the components use.
type logger interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// failed records a failed call (fails is the caller's run of failures)
// and sleeps the backoff for it; the error is ctx's if it ended meanwhile.
func (h *redisHealth) failed(ctx context.Context, fails *int, op string, err error) error {
	*fails++
	h.metric.Inc()
	h.errs.Add(1)
	if *fails == 1 || *fails%20 == 0 {
		h.log.Warn("taskq: redis unavailable, backing off", "op", op, "failures", *fails, "err", err)
	}
	h.failure(err)
	return sleep(ctx, h.clock, h.backoff.Delay(*fails-1))
}

// ok records a successful call, ending the caller's run of failures.
func (h *redisHealth) ok(fails *int) {
	if *fails > 0 {
		h.log.Info("taskq: redis reachable again, resuming", "after_failures", *fails)
	}
	*fails = 0
	h.answered()
}

type inflightKey struct{ queue, id string }

type inflightTask struct {
	cancel context.CancelFunc // set before the task enters the set; safe to call from any goroutine
	// lost is set (under inflightSet.mu) by the lease keeper when the lease
	// was lost: another worker may run the task. The processor Loads it
	// after the handler returned and the task left the set.
	lost atomic.Bool
	// cancelled is set by the canceller: an operator cancelled the task
	// (cancel.lua already ended it in Redis).
	cancelled atomic.Bool
	// lease is the lease's end (Unix ms) as last extended; the lease keeper
	// Stores, the handler's Task.LeaseDeadline Loads.
	lease atomic.Int64
	// held and maybe (under inflightSet.mu) are the lease ends this run
	// may hold in Redis, the fencing token extend.lua checks: held as the
	// dequeue or the last answered extend set it, maybe those of extends
	// since whose answer was lost (each may or may not have applied).
	held  int64
	maybe []int64
}

// maxMaybe bounds a run's unanswered extends: a lease outlives only a few
// heartbeats, so a run whose last maxMaybe extends went unanswered has
// lost it (its next beat will say so).
const maxMaybe = 16

// inflightSet is the tasks whose handlers run now; the processors add and
// remove, the lease keeper reads and marks lost. Any goroutine.
type inflightSet struct {
	// mu protects m. Invariant: a key is in m exactly while its handler runs.
	mu sync.Mutex
	m  map[inflightKey]*inflightTask
}

func newInflightSet() *inflightSet { return &inflightSet{m: map[inflightKey]*inflightTask{}} }

// add records a run; a run of the same task already there lost its
// lease (a later dequeue leased the task again) and is stopped.
func (s *inflightSet) add(k inflightKey, t *inflightTask) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.m[k]; old != nil && old != t {
		old.lost.Store(true)
		old.cancel()
	}
	s.m[k] = t
}

// remove drops run t of k (not a later run that replaced it).
func (s *inflightSet) remove(k inflightKey, t *inflightTask) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[k] == t {
		delete(s.m, k)
	}
}

func (s *inflightSet) len() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.m) }

// heldRun is a running task and the lease ends it may hold, as the lease
// keeper read them.
type heldRun struct {
	t     *inflightTask
	lease rdb.Lease
}

// byQueue lists the runs and their leases per queue.
func (s *inflightSet) byQueue() map[string][]heldRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]heldRun{}
	for k, t := range s.m {
		out[k.queue] = append(out[k.queue], heldRun{t, rdb.Lease{ID: k.id, Held: t.held, Maybe: slices.Clone(t.maybe)}})
	}
	return out
}

// cancelTask marks a running task cancelled by an operator and cancels its
// handler; false if the task does not run here.
func (s *inflightSet) cancelTask(k inflightKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.m[k]
	if t == nil {
		return false
	}
	t.cancelled.Store(true)
	t.cancel()
	return true
}

// extended records the outcome of an extend of runs to until: the new
// lease end when the answer came, else one more end they may hold.
func (s *inflightSet) extended(runs []heldRun, until time.Time, answered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := until.UnixMilli()
	for _, r := range runs {
		t := r.t
		switch {
		case answered:
			t.lease.Store(ms)
			t.held, t.maybe = ms, nil
		case len(t.maybe) < maxMaybe:
			t.maybe = append(t.maybe, ms)
		}
	}
}

// lose marks a run's lease lost and cancels its handler.
func (s *inflightSet) lose(t *inflightTask) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.lost.Store(true)
	t.cancel()
}

// retryRedis runs fn until it succeeds or ctx ends, backing off (capped)
// between failures; it logs the first failure and the recovery.
func retryRedis(ctx context.Context, h *redisHealth, what string, fn func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			h.answered()
			if attempt > 0 {
				h.log.Info("taskq: redis reachable again", "op", what, "attempts", attempt+1)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h.metric.Inc()
		h.errs.Add(1)
		h.failure(err)
		if attempt == 0 {
			h.log.Warn("taskq: redis call failed, backing off", "op", what, "err", err)
		}
		if sleep(ctx, h.clock, h.backoff.Delay(attempt)) != nil {
			return ctx.Err()
		}
	}
}
