package sched

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
)

// Errors returned by the scheduler. Match them with errors.Is.
var (
	// ErrStopped: the scheduler is stopping or stopped; also the error a
	// process force-closed by Stop is reported with.
	ErrStopped = errors.New("sched: scheduler stopped")
	// ErrNoProcess: no live process has that PID.
	ErrNoProcess = errors.New("sched: no such process")
	// ErrNoHandler: a yielded command's type has no registered handler
	// (delivered as the yield's completion error).
	ErrNoHandler = errors.New("sched: no handler for command type")
	// ErrNoStatus: a step returned nil without setting out.Status.
	ErrNoStatus = errors.New("sched: step set no status")
	// ErrStuck: Stop's ctx ended while a worker was still inside a step;
	// the worker was abandoned (see Stop).
	ErrStuck = errors.New("sched: worker stuck in a step")
	// ErrConfig: New was given an invalid Config.
	ErrConfig = errors.New("sched: invalid config")
)

// PanicError is the error a process completes with when Init, Step, Close
// or a handler panics.
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the panicking goroutine's stack
}

func (e *PanicError) Error() string { return fmt.Sprintf("sched: panic: %v", e.Value) }

// MaxWorkers bounds Config.Workers: a parking worker scans every worker's
// deque, so a pool far wider than the machine only costs (10,000 workers
// took half a second to start, 40,000 fifteen).
const MaxWorkers = 1024

// Config configures a Scheduler. The zero value is a valid configuration:
// every zero field means the documented default.
type Config struct {
	// Workers is the number of worker goroutines. 0 means GOMAXPROCS.
	Workers int
	// Logger receives failures (a process that errors or panics) at Error
	// level and lifecycle at Debug. nil discards.
	Logger *slog.Logger
	// Handlers maps command types to their handlers. The map is copied by
	// New; later changes to it have no effect. nil means no handlers (every
	// yield completes with ErrNoHandler).
	Handlers map[CommandType]Handler
	// OnExit, if set, is called once per process after its Close, with
	// nil for a process that finished, the step's error (wrapped) or a
	// *PanicError for one that failed, or ErrStopped for one Stop closed.
	// It runs on a worker (or in Stop), so it must be quick. A panic in
	// OnExit is recovered, logged and counted in Stats.OnExitPanics.
	OnExit func(pid PID, err error)

	// hooks, set only by this package's tests, open the race windows of
	// the wake-up protocol deterministically.
	hooks *testHooks
}

// testHooks are called, when set, at the instants named; nil in production.
type testHooks struct {
	// beforePark runs on a worker that found no work, before it takes
	// idleMu to register as parked (the window in which a producer sees
	// no sleepers).
	beforePark func()
	// beforeStopSpin runs on a worker that has spun out, before it leaves
	// the spinning count to park (a producer then sees a spinner and
	// wakes nobody).
	beforeStopSpin func()
	// beforeWaitCAS runs on the worker between loading a Running state
	// and CASing it to Idle/Blocked (the window of the original
	// runtime's lost wake-up).
	beforeWaitCAS func(p *proc)
	// spin runs on a worker at every failed search before it parks, with
	// the spin count and whether it is about to yield the thread.
	spin func(spins int, yield bool)
}

func (c *Config) validate() error {
	if c.Workers < 0 || c.Workers > MaxWorkers {
		return fmt.Errorf("%w: Workers = %d, want 0 (GOMAXPROCS) to %d", ErrConfig, c.Workers, MaxWorkers)
	}
	for t, h := range c.Handlers {
		if h == nil {
			return fmt.Errorf("%w: Handlers[%d] is nil", ErrConfig, t)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Workers == 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Tuning constants. They are not in Config because the values come from the
// Go runtime and Tokio and the tests assert the bounds they imply.
const (
	// globalCheckTicks: every 61st time a worker looks for work it reads
	// the global queue first, so processes spawned or woken from outside
	// cannot be starved by a worker that always has local work (the Go
	// runtime's schedtick%61 and Tokio's default global_queue_interval).
	globalCheckTicks = 61
	// maxRunStreak bounds how many times in a row a worker runs the same
	// process that keeps returning StatusContinue; after that the process
	// goes to the tail of the global queue instead of the local deque
	// (compare Tokio's MAX_LIFO_POLLS_PER_TICK = 3).
	maxRunStreak = 8
	// globalBatch: a worker that takes one process from the global queue
	// moves up to this many more into its deque.
	globalBatch = 16
	// stealMax caps one steal-half.
	stealMax = 128
	// Adaptive spinning before parking: tight retries below spinTight,
	// runtime.Gosched below spinYield, then park.
	spinTight = 4
	spinYield = 16
)
