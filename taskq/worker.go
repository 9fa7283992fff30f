package taskq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// QueueSpec names a queue a worker serves and its weight (weighted mode) or
// its rank (strict mode: earlier specs first).
type QueueSpec struct {
	Name   string
	Weight int // default 1
}

// DefaultRedisLostAfter is how long a worker waits for an unreachable
// Redis before it gives up (WorkerConfig.RedisLostAfter).
const DefaultRedisLostAfter = time.Minute

// DefaultCancelGrace is how long a cancelled handler may run on before the
// worker abandons it (WorkerConfig.CancelGrace).
const DefaultCancelGrace = 5 * time.Second

// WorkerConfig configures a Worker. Zero values are the documented defaults.
type WorkerConfig struct {
	// Redis is "host:port", "redis://host:port/db", comma-separated
	// cluster seeds, or "redis-sentinel://[user:pass@]host:port,host:port/MASTER[?db=N]"
	// (the sentinels watching master set MASTER; the worker follows the
	// master they name across a failover, riding out the switch as an
	// outage shorter than RedisLostAfter). Required.
	Redis string
	// Queues the worker is assigned to (default: "default" with weight 1).
	Queues []QueueSpec
	// Strict serves queues in the order given (a later queue only when every
	// earlier one is empty) instead of a weighted random order per dequeue.
	Strict bool
	// Concurrency is the number of tasks run at once (default 10).
	Concurrency int
	// Prefetch is how many tasks may wait, leased, for a free handler
	// (default Concurrency): it lets one dequeue call take a larger batch.
	// While the handlers' mean run time is short against a dequeue call,
	// up to ShortPrefetch more may wait (prefetch.go). On shutdown,
	// waiting tasks go back to their queues.
	Prefetch int
	// BatchSize caps the tasks taken per dequeue call (default 64).
	BatchSize int
	// DisableSteal stops the worker from taking tasks of queues it is not
	// assigned to when its own are empty.
	DisableSteal bool
	// StealInterval is how often the steal targets (other queues, by
	// backlog) are refreshed (default 1s).
	StealInterval time.Duration

	// LeaseDuration is how long a task stays with a worker without a
	// heartbeat before another worker may run it (default 30s).
	LeaseDuration time.Duration
	// HeartbeatInterval is how often leases are extended (default LeaseDuration/3).
	HeartbeatInterval time.Duration
	// MaintainInterval is how often expired leases are reaped and due tasks
	// promoted (default 1s).
	MaintainInterval time.Duration
	// IdleWait is the longest an idle worker blocks on the wake-up lists
	// before looking again (default 1s).
	IdleWait time.Duration

	// DefaultTimeout bounds an attempt of a task that has no Timeout (default 30m).
	DefaultTimeout time.Duration
	// CancelGrace is how long a handler may run on after its context ended
	// before the worker abandons it and retries the task (default
	// DefaultCancelGrace).
	CancelGrace time.Duration
	// ShutdownTimeout is how long Run waits for running tasks after ctx
	// ends before cancelling them (default 8s; negative: cancel at once).
	ShutdownTimeout time.Duration

	// Retry is the delay policy between attempts (default: 1s initial, 10m
	// max, x2, 20% jitter).
	Retry backoff.Policy
	// RedisLostAfter gives up on Redis (seed §5.2: a permanent loss shuts
	// the worker down): unreachable this long without a break, the worker
	// cancels its handlers and Run returns a *RedisLostError naming the
	// address (their tasks' leases lapse and another worker runs them once
	// Redis is back). A Redis that answers LOADING is up, not lost. Default
	// DefaultRedisLostAfter (1 min); negative: never give up, reconnect for
	// as long as it takes.
	RedisLostAfter time.Duration
	// RedisBackoff paces reconnect attempts while Redis is unreachable
	// (default: 100ms initial, 1s max: a Redis back from a restart or a
	// Sentinel failover is found within a second of it).
	RedisBackoff backoff.Policy
	// DeadRetention is how long dead tasks are kept (default 7 days);
	// DeadMax caps their number per queue (default 10,000).
	DeadRetention time.Duration
	DeadMax       int

	// OnSuccess and OnFailure are called after each attempt (nil = none).
	// dead is true when the task went to the dead-letter set.
	OnSuccess func(t *Task)
	OnFailure func(t *Task, err error, dead bool)

	// Adaptive tunes the controller (see AdaptiveConfig).
	Adaptive AdaptiveConfig

	// Clock times leases, heartbeats, maintenance, retry and Redis backoff,
	// the adaptive windows, CancelGrace and ShutdownTimeout (default: the
	// real clock), so tests advance time instead of sleeping. A task's
	// Timeout and Deadline are context deadlines, and the duration metrics
	// measure handlers: both run on real time.
	Clock clock.Clock

	// ID names the worker in Redis (default host:pid:random).
	ID string
	// Logger receives operational logs (nil = discard).
	Logger *slog.Logger
	// Registry receives the Prometheus metrics (nil = none).
	Registry prometheus.Registerer
}

func (c *WorkerConfig) validate() error {
	if c.Redis == "" {
		return errors.New("taskq: WorkerConfig.Redis is empty (want host:port, redis://… or redis-sentinel://…)")
	}
	if err := c.validateQueues(); err != nil {
		return err
	}
	if c.Concurrency < 0 {
		return fmt.Errorf("taskq: Concurrency %d, want > 0", c.Concurrency)
	}
	if c.Prefetch < 0 {
		return fmt.Errorf("taskq: Prefetch %d, want >= 0", c.Prefetch)
	}
	c.defaults()
	return nil
}

// validateQueues checks the queue names and weights (default: "default").
func (c *WorkerConfig) validateQueues() error {
	if len(c.Queues) == 0 {
		c.Queues = []QueueSpec{{Name: DefaultQueue, Weight: 1}}
	}
	seen := map[string]bool{}
	for i := range c.Queues {
		q := &c.Queues[i]
		if err := checkName("queue", q.Name); err != nil {
			return err
		}
		if seen[q.Name] {
			return fmt.Errorf("taskq: queue %q listed twice", q.Name)
		}
		seen[q.Name] = true
		if q.Weight < 0 {
			return fmt.Errorf("taskq: queue %q has weight %d, want > 0", q.Name, q.Weight)
		}
		if q.Weight == 0 {
			q.Weight = 1
		}
	}
	return nil
}

// defaults fills the documented defaults of zero fields.
func (c *WorkerConfig) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = 10
	}
	if c.Prefetch == 0 {
		c.Prefetch = c.Concurrency
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 64
	}
	def(&c.StealInterval, time.Second)
	def(&c.LeaseDuration, 30*time.Second)
	def(&c.HeartbeatInterval, c.LeaseDuration/3)
	def(&c.MaintainInterval, time.Second)
	def(&c.IdleWait, time.Second)
	def(&c.DefaultTimeout, 30*time.Minute)
	def(&c.CancelGrace, DefaultCancelGrace)
	switch {
	case c.ShutdownTimeout < 0:
		c.ShutdownTimeout = 0 // cancel at once
	case c.ShutdownTimeout == 0:
		c.ShutdownTimeout = 8 * time.Second
	}
	def(&c.DeadRetention, 7*24*time.Hour)
	if c.RedisLostAfter == 0 {
		c.RedisLostAfter = DefaultRedisLostAfter
	}
	if c.DeadMax <= 0 {
		c.DeadMax = 10000
	}
	if c.Retry == (backoff.Policy{}) {
		c.Retry = backoff.Policy{Initial: time.Second, Max: 10 * time.Minute}
	}
	if c.RedisBackoff == (backoff.Policy{}) {
		c.RedisBackoff = backoff.Policy{Initial: 100 * time.Millisecond, Max: time.Second}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), newID()[:6])
	}
	c.Clock = clock.Or(c.Clock)
	c.Adaptive.defaults()
}

// State is a worker's lifecycle state.
//
//	New --Run--> Running --ctx ends--> Stopping --drained--> Stopped
type State int32

// Worker states.
const (
	StateNew State = iota
	StateRunning
	StateStopping
	StateStopped
)

func (s State) String() string {
	switch s {
	case StateNew:
		return "new"
	case StateRunning:
		return "running"
	case StateStopping:
		return "stopping"
	case StateStopped:
		return "stopped"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// ErrWorkerStarted is returned by a second Run.
var ErrWorkerStarted = errors.New("taskq: worker already started")

// Worker takes tasks from Redis and runs their handlers. It wires the
// background components, each in its own file:
//
//	fetcher      leases tasks for free slots (one dequeue per batch), fetcher.go
//	stealer      keeps the steal targets (other queues by backlog), stealer.go
//	leaseKeeper  extends running tasks' leases, cancels lost ones, leasekeeper.go
//	maintainer   reaps, promotes, applies retention, writes the record, maintainer.go
//	adaptive     seed §7.3: retry factor, steal interval, adaptive.go
//
// and runs the handlers itself (process.go), acknowledging in batches.
type Worker struct {
	// Set by NewWorker, read-only afterwards (any goroutine).
	cfg      WorkerConfig
	r        *rdb.RDB
	log      *slog.Logger
	clk      clock.Clock
	m        *metrics
	assigned map[string]bool // the queues in cfg.Queues
	health   *redisHealth
	inflight *inflightSet // safe for any goroutine (its own lock)
	ackCh    chan ackReq  // processors send; ackLoop receives; Run closes after the drain

	// state is a State; Run moves it with CompareAndSwap/Store (sequentially
	// consistent), anyone may Load it.
	state atomic.Int32
	// started is written by Run before any component starts (their start
	// orders it before their reads) and not written again.
	started time.Time

	// hmu protects handlers (Handle writes, processors read).
	hmu        sync.RWMutex
	handlers   map[string]handling
	middleware []Middleware

	// processed and failed count ended attempts; processors Add, the
	// adaptive controller and the worker record Load (any goroutine).
	processed, failed atomic.Int64
	// runTimes sums the handlers' run times, for the prefetcher.
	runTimes runTimes

	// The background components, created by NewWorker; Run starts and
	// stops them (stop is safe for one never started).
	stealer  *stealer
	leases   *leaseKeeper
	cancels  *canceller
	lost     atomic.Pointer[RedisLostError] // set once when the worker gives up on Redis
	host     string                         // os.Hostname, for Task.Host
	maint    *maintainer
	adaptive *adaptiveController
}

// NewWorker checks cfg and connects to Redis (ErrRedisUnreachable if it
// does not answer).
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r, err := rdb.Open(cfg.Redis)
	if err != nil {
		return nil, err
	}
	m := newMetrics(cfg.Registry)
	w := &Worker{
		cfg: cfg, r: r, log: cfg.Logger, clk: cfg.Clock, m: m,
		assigned: map[string]bool{}, handlers: map[string]handling{},
		inflight: newInflightSet(),
		host:     hostname(),
		health:   &redisHealth{log: cfg.Logger, metric: m.redisErrors, clock: cfg.Clock, backoff: cfg.RedisBackoff},
		ackCh:    make(chan ackReq, 4096),
	}
	r.OnLoading(w.health.loading)
	for _, q := range cfg.Queues {
		w.assigned[q.Name] = true
	}
	w.stealer = newStealer(stealerParams{r: r, assigned: w.assigned, interval: cfg.StealInterval, clock: cfg.Clock, m: m})
	w.leases = newLeaseKeeper(leaseKeeperParams{r: r, inflight: w.inflight, lease: cfg.LeaseDuration,
		interval: cfg.HeartbeatInterval, clock: cfg.Clock})
	w.cancels = newCanceller(cancellerParams{r: r, inflight: w.inflight, clock: cfg.Clock, log: cfg.Logger})
	w.maint = newMaintainer(maintainerParams{r: r, queues: w.queueNames(), allQueues: !cfg.DisableSteal,
		interval: cfg.MaintainInterval, deadRetention: cfg.DeadRetention, deadMax: cfg.DeadMax,
		clock: cfg.Clock, m: m, log: cfg.Logger, writeRecord: w.writeRecord})
	w.adaptive = newAdaptiveController(adaptiveParams{cfg: cfg.Adaptive, baseSteal: cfg.StealInterval, baseIdle: cfg.IdleWait, queues: w.queueNames(), stealer: w.stealer,
		disableSteal: cfg.DisableSteal, counts: func() (int64, int64) { return w.processed.Load(), w.failed.Load() },
		backlog: w.maint.backlog,
		clock:   cfg.Clock, m: m, log: cfg.Logger})
	return w, nil
}

// Handle registers h for tasks of type typ (replacing an earlier one),
// with opts (WithRetry: the type's own retry policy).
func (w *Worker) Handle(typ string, h HandlerFunc, opts ...HandleOption) {
	hd := handling{h: h}
	for _, o := range opts {
		o(&hd)
	}
	w.hmu.Lock()
	defer w.hmu.Unlock()
	w.handlers[typ] = hd
}

// handling is what Handle registered for typ.
func (w *Worker) handling(typ string) (handling, bool) {
	w.hmu.RLock()
	defer w.hmu.RUnlock()
	hd, ok := w.handlers[typ]
	return hd, ok
}

// handler is typ's handler inside the middleware, nil if none.
func (w *Worker) handler(typ string) HandlerFunc {
	hd, ok := w.handling(typ)
	if !ok || hd.h == nil {
		return nil
	}
	h := hd.h
	for i := len(w.middleware) - 1; i >= 0; i-- {
		h = w.middleware[i](h)
	}
	return h
}

// ID is the worker's id in Redis.
func (w *Worker) ID() string { return w.cfg.ID }

// State reports the lifecycle state.
func (w *Worker) State() State { return State(w.state.Load()) }

func (w *Worker) queueNames() []string {
	out := make([]string, len(w.cfg.Queues))
	for i, q := range w.cfg.Queues {
		out[i] = q.Name
	}
	return out
}

// Run serves tasks until ctx ends, then shuts down gracefully: it stops
// fetching, waits up to ShutdownTimeout for running tasks, cancels the rest
// and gives their tasks back to their queues without counting a failure,
// marks the worker stopped in Redis and closes the connections. A task
// whose handler ignores cancellation is abandoned after CancelGrace.
func (w *Worker) Run(ctx context.Context) error {
	if !w.state.CompareAndSwap(int32(StateNew), int32(StateRunning)) {
		return ErrWorkerStarted
	}
	w.started = w.clk.Now()
	defer w.r.Close()
	// lost ends when Redis has been unreachable for RedisLostAfter: it
	// stops the run like ctx, and also what outlives ctx (handlers, persist).
	lost, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	go w.watchRedis(lost, giveUp)
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	context.AfterFunc(lost, stopRun)
	if err := retryRedis(ctx, w.health, "register queues", func(c context.Context) error {
		return w.r.RegisterQueues(c, w.queueNames()...)
	}); err != nil {
		w.state.Store(int32(StateStopped))
		return w.lostErr() // ctx ended (or Redis was lost) before Redis answered: nothing was taken
	}
	w.m.initQueues(w.queueNames())
	w.writeRecord(ctx)
	w.log.Info("taskq worker started", "id", w.cfg.ID, "queues", w.queueNames(), "concurrency", w.cfg.Concurrency, "strict", w.cfg.Strict)

	// persist outlives ctx so that acks, fails and requeues of the drain
	// still reach Redis; it ends once the drain is over.
	persist, stopPersist := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPersist()
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	context.AfterFunc(lost, func() { cancelHandlers(); stopPersist() })

	// A slot is a place for one leased task: running or waiting in tasks.
	// ShortPrefetch more may circulate while tasks are short (prefetch.go).
	tasks := make(chan rdb.Dequeued, w.cfg.Prefetch+ShortPrefetch)
	slots := make(chan struct{}, w.cfg.Concurrency+w.cfg.Prefetch+ShortPrefetch)
	for range w.cfg.Concurrency + w.cfg.Prefetch {
		slots <- struct{}{}
	}
	f := newFetcher(fetcherParams{r: w.r, queues: w.cfg.Queues, strict: w.cfg.Strict, assigned: w.assigned,
		batch: w.cfg.BatchSize, lease: w.cfg.LeaseDuration, adaptive: w.adaptive, stealer: w.stealer,
		health: w.health, clock: w.clk, m: w.m, persist: persist, tasks: tasks, slots: slots,
		prefetch: newPrefetcher(&w.runTimes, w.cfg.Concurrency, w.cfg.Prefetch)})
	f.start(ctx)
	var procs sync.WaitGroup
	for range w.cfg.Concurrency {
		procs.Go(func() {
			for d := range tasks {
				w.process(handlerCtx, persist, d)
				slots <- struct{}{}
			}
		})
	}
	ackDone := make(chan struct{})
	go func() { w.ackLoop(persist); close(ackDone) }()
	bg := context.WithoutCancel(ctx)
	w.leases.start(bg)
	w.cancels.start(bg)
	w.maint.start(bg)
	w.adaptive.start(bg)
	if !w.cfg.DisableSteal {
		w.stealer.start(bg)
	}

	<-ctx.Done()
	w.state.Store(int32(StateStopping))
	w.log.Info("taskq worker stopping", "id", w.cfg.ID, "running", w.inflight.len())
	f.stop()
	w.drain(persist, tasks, &procs, cancelHandlers)
	close(w.ackCh)
	<-ackDone
	w.stopComponents()
	w.state.Store(int32(StateStopped))
	recCtx, cancelRec := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	w.writeRecord(recCtx)
	cancelRec()
	stopPersist()
	w.log.Info("taskq worker stopped", "id", w.cfg.ID, "processed", w.processed.Load(), "failed", w.failed.Load())
	return w.lostErr()
}

// drain gives the tasks still waiting back to their queues, then waits up
// to ShutdownTimeout for the running ones before cancelling them.
func (w *Worker) drain(persist context.Context, tasks chan rdb.Dequeued, procs *sync.WaitGroup, cancelHandlers func()) {
	var waiting []rdb.Dequeued
drain:
	for {
		select {
		case d := <-tasks:
			waiting = append(waiting, d)
		default:
			break drain
		}
	}
	giveBack(persist, w.r, w.health, waiting)
	close(tasks)
	drained := make(chan struct{})
	go func() { procs.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-w.clk.After(w.cfg.ShutdownTimeout):
		w.log.Warn("taskq shutdown timeout: cancelling running tasks", "running", w.inflight.len())
		cancelHandlers()
		<-drained // every process() returns within CancelGrace after the cancel
	}
}

// stopComponents stops the background components (each safe to stop twice
// or unstarted).
func (w *Worker) stopComponents() {
	w.leases.stop()
	w.cancels.stop()
	w.maint.stop()
	w.adaptive.stop()
	w.stealer.stop()
}

func (w *Worker) writeRecord(ctx context.Context) {
	win := w.adaptive.last()
	rec := WorkerRecord{
		ID: w.cfg.ID, PID: os.Getpid(), Queues: w.queueNames(), State: w.State().String(),
		Started: w.started, Heartbeat: w.clk.Now(), Active: w.inflight.len(),
		Processed: w.processed.Load(), Failed: w.failed.Load(), Steals: w.stealer.steals.Load(),
		WindowEnd: win.at, RatePerSec: win.rate, ErrorRate: win.errRate, RetryScale: w.adaptive.retryScale(),
	}
	rec.Windows, rec.RateAvg, rec.ErrorRateAvg = w.adaptive.trend()
	rec.MemBytes, rec.MemLimit = memoryInUse()
	rec.Host, _ = os.Hostname()
	b, _ := json.Marshal(rec)
	if err := w.r.SetWorker(ctx, w.cfg.ID, string(b)); err != nil {
		w.log.Debug("taskq: write worker record", "err", err)
	}
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
