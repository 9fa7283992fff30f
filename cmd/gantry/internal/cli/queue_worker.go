package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/sysmem"
	"github.com/gantryhq/gantry/taskq"
	"github.com/gantryhq/gantry/taskq/taskqotel"
	"github.com/gantryhq/gantry/taskq/tasks"
)

func newQueueWorkerCmd(env *Env) *cobra.Command {
	var o queueWorkerOptions
	cmd := &cobra.Command{
		Use:   "worker --redis URL [--queues a,b:3] [--strict] [--concurrency N] [--metrics-addr ADDR]",
		Short: "Run a worker with the built-in task types noop, sleep, fail and sort until SIGINT/SIGTERM",
		Long: `Worker serves the given queues (weighted by default, in order with --strict),
steals from other queues when its own are empty, and runs the built-in task
types: noop; sleep {"ms": N}; fail {"times": N} (fails the first N attempts);
sort {"input": [dirs], "output": dir} (gantry sort local).
On SIGINT/SIGTERM it stops fetching, waits --shutdown-timeout for running
tasks, cancels the rest and puts them back; a second signal exits at once.
A Redis unreachable for --redis-lost-after (at the start or later) makes it
exit 1, naming the address. It runs under a Go memory limit (--memory-limit,
else GOMEMLIMIT, else 90% of its cgroup's or the machine's memory), which
the health check measures its memory against.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runQueueWorker(cmd, env, &o) },
	}
	o.flags(cmd.Flags())
	return cmd
}

// flags defines `queue worker`'s flags on f, into o.
func (o *queueWorkerOptions) flags(f *pflag.FlagSet) {
	f.StringVar(&o.cfg.Redis, "redis", "127.0.0.1:6379", redisFlagHelp)
	f.StringVar(&o.queues, "queues", "default", "queues to serve, name[:weight], comma-separated")
	f.BoolVar(&o.cfg.Strict, "strict", false, "strict priority: serve a queue only when every earlier one is empty")
	f.IntVar(&o.cfg.Concurrency, "concurrency", 10, "tasks run at once")
	f.StringVar(&o.metrics, "metrics-addr", "", "serve Prometheus /metrics and /healthz here (e.g. 127.0.0.1:9108)")
	f.DurationVar(&o.cfg.ShutdownTimeout, "shutdown-timeout", 8*time.Second, "how long running tasks may finish after a signal (0: cancel them at once)")
	f.DurationVar(&o.cfg.LeaseDuration, "lease", 30*time.Second, "lease of a taken task; a dead worker's tasks rerun after it")
	f.BoolVar(&o.cfg.DisableSteal, "no-steal", false, "never take tasks from queues not listed in --queues")
	f.DurationVar(&o.cfg.DeadRetention, "dead-retention", 7*24*time.Hour, "how long dead-letter tasks are kept")
	f.IntVar(&o.cfg.DeadMax, "dead-max", 10000, "most dead-letter tasks kept per queue (oldest dropped first)")
	f.DurationVar(&o.lostAfter, "redis-lost-after", taskq.DefaultRedisLostAfter, "exit 1 once Redis has been unreachable this long, naming it; 0: wait for it forever")
	f.Var(sizeValue{&o.memLimit}, "memory-limit", "Go memory limit, e.g. 2GiB (default: GOMEMLIMIT if set, else 90% of the cgroup's or the machine's memory)")
	f.BoolVar(&o.noCron, "no-cron", false, "do not run the periodic-task scheduler (queue cron) in this worker")
}

// queueWorkerOptions are `gantry queue worker`'s flags.
type queueWorkerOptions struct {
	cfg             taskq.WorkerConfig
	queues, metrics string
	lostAfter       time.Duration // --redis-lost-after: 0 is never
	memLimit        int64         // --memory-limit: 0 is the default
	noCron          bool
}

// config is the worker configuration the flags give.
func (o *queueWorkerOptions) config(env *Env) (taskq.WorkerConfig, error) {
	cfg := o.cfg
	qs, err := parseQueues(o.queues)
	if err != nil {
		return cfg, err
	}
	cfg.Queues = qs
	if err := o.checkBounds(); err != nil {
		return cfg, err
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = -1 // taskq: cancel at once
	}
	switch {
	case o.lostAfter < 0:
		return cfg, fmt.Errorf("--redis-lost-after %s: want a duration >= 0 (0: wait for Redis forever)", o.lostAfter)
	case o.lostAfter == 0:
		cfg.RedisLostAfter = -1 // never
	default:
		cfg.RedisLostAfter = o.lostAfter
	}
	cfg.Logger = env.Logger
	if env.Registry != nil {
		cfg.Registry = env.Registry
	}
	return cfg, nil
}

// checkBounds refuses the flag values the worker cannot honour, where the
// library would put its default in their place.
func (o *queueWorkerOptions) checkBounds() error {
	c := o.cfg
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("--concurrency %d: want at least 1", c.Concurrency)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("--shutdown-timeout %s: want a duration >= 0 (0: cancel running tasks at once)", c.ShutdownTimeout)
	case c.LeaseDuration <= 0:
		return fmt.Errorf("--lease %s: want a positive duration", c.LeaseDuration)
	case c.DeadRetention <= 0:
		return fmt.Errorf("--dead-retention %s: want a positive duration", c.DeadRetention)
	case c.DeadMax < 1:
		return fmt.Errorf("--dead-max %d: want at least 1", c.DeadMax)
	}
	return nil
}

// runQueueWorker waits for Redis, registers the built-in task types and
// serves until the command's context ends or the worker gives up on Redis.
func runQueueWorker(cmd *cobra.Command, env *Env, o *queueWorkerOptions) error {
	cfg, err := o.config(env)
	if err != nil {
		return err
	}
	if env.ShutdownGrace != nil {
		// After a signal: the running tasks' --shutdown-timeout, then the
		// cancelled handlers' grace, then giving their tasks back.
		wait, grace := max(cfg.ShutdownTimeout, 0), taskq.DefaultCancelGrace+5*time.Second
		env.ShutdownGrace(wait + min(grace, math.MaxInt64-wait)) // saturating
	}
	defer setWorkerMemoryLimit(env, o.memLimit)()
	w, err := newWorkerWaiting(cmd.Context(), env, cfg)
	if err != nil {
		return err
	}
	if w == nil {
		return nil // signalled before Redis answered
	}
	tasks.Register(w, env.Logger)
	ctx := cmd.Context()
	tcfg, flush, traced, err := queueTracing(ctx, env.Logger, "gantry-queue-worker")
	if err != nil {
		return err
	}
	defer flush()
	if traced {
		w.Use(taskqotel.Middleware(tcfg))
	}
	if o.metrics != "" {
		stop, err := serveQueueMetrics(env, o.metrics, cfg.Redis)
		if err != nil {
			return err
		}
		defer stop()
	}
	if !o.noCron {
		sch, err := taskq.NewScheduler(taskq.SchedulerConfig{Redis: cfg.Redis, Logger: env.Logger})
		if err != nil {
			return err
		}
		// The scheduler ends with the worker, whatever ended it (a signal,
		// Redis lost, an error): on the command's context alone it would
		// outlive a worker that gave up on Redis, retrying Redis forever.
		schCtx, stopSch := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { sch.Run(schCtx); close(done) }()
		defer func() { stopSch(); <-done }()
	}
	return w.Run(ctx)
}

// setWorkerMemoryLimit gives the process a Go memory limit, so that the
// worker's record carries one and the health check's worker-memory check
// (its memory against its limit) has something to measure: limit when
// --memory-limit set one; else GOMEMLIMIT's, which the runtime applied; else
// 90% of the memory available to the process (sysmem.Available). The
// returned func puts the previous limit back.
func setWorkerMemoryLimit(env *Env, limit int64) (restore func()) {
	prev := debug.SetMemoryLimit(-1)
	restore = func() { debug.SetMemoryLimit(prev) }
	source := "--memory-limit"
	switch {
	case limit > 0:
	case os.Getenv("GOMEMLIMIT") != "": // the runtime applied it at start
		env.Logger.Info("memory limit", "bytes", prev, "from", "GOMEMLIMIT")
		return restore
	default:
		avail, from := sysmem.Available()
		if avail <= 0 {
			env.Logger.Warn("no memory limit: the memory available could not be read; the health check's worker-memory check stays silent (set --memory-limit)")
			return restore
		}
		limit, source = avail/10*9, "90% of "+from
	}
	debug.SetMemoryLimit(limit)
	env.Logger.Info("memory limit", "limit", formatBytes(limit), "from", source)
	return restore
}

// newWorkerWaiting creates the worker, waiting with capped backoff while
// Redis is unreachable (a daemon started before its Redis should not exit)
// until cfg.RedisLostAfter (forever when negative). It returns nil, nil
// when ctx ends first.
func newWorkerWaiting(ctx context.Context, env *Env, cfg taskq.WorkerConfig) (*taskq.Worker, error) {
	wait := backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		w, err := taskq.NewWorker(cfg)
		if err == nil {
			return w, nil
		}
		if !errors.Is(err, taskq.ErrRedisUnreachable) {
			return nil, err // a configuration error, not an outage
		}
		if attempt == 0 {
			env.Logger.Warn("redis unreachable, waiting for it", "redis", cfg.Redis, "err", err, "redis_lost_after", cfg.RedisLostAfter)
		}
		if d := time.Since(start); cfg.RedisLostAfter > 0 && d >= cfg.RedisLostAfter {
			return nil, &taskq.RedisLostError{Addr: cfg.Redis, For: d}
		}
		if backoff.Sleep(ctx, wait.Delay(attempt)) != nil {
			return nil, nil
		}
	}
}

// serveQueueMetrics serves env's registry at /metrics and the queue's health
// verdict (JSON) at /healthz until the returned stop is called.
func serveQueueMetrics(env *Env, addr, redis string) (func(), error) {
	c, err := taskq.NewClient(taskq.ClientConfig{Redis: redis})
	if err != nil {
		return nil, err
	}
	stop, err := serveMetrics(env, addr, route{"/healthz", taskq.HealthHandler(c, taskq.HealthConfig{})})
	if err != nil {
		c.Close()
		return nil, err
	}
	return func() { stop(); c.Close() }, nil
}
