//go:build unix

package schedbench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gantryhq/gantry/sched"
)

func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("schedbench: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// IdleCPU starts a scheduler, runs a burst of work, waits until every worker
// has parked, and returns the whole process's CPU use over window as a
// percentage of one core.
func IdleCPU(ctx context.Context, workers int, window time.Duration) (float64, error) {
	const burst = 10_000
	var left atomic.Int64
	left.Store(burst)
	done := make(chan struct{})
	s, err := sched.New(sched.Config{Workers: workers, OnExit: func(sched.PID, error) {
		if left.Add(-1) == 0 {
			close(done)
		}
	}})
	if err != nil {
		return 0, err
	}
	defer stop(s)
	trivial := proc(func(_ []sched.Event, out *sched.StepOutput) error {
		out.Status = sched.StatusDone
		return nil
	})
	for i := 0; i < burst; i++ {
		if _, err := s.Spawn(trivial, "main", nil); err != nil {
			return 0, err
		}
	}
	if err := waitOrTimeout(done); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Parked != workers {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("schedbench: workers did not park: %d of %d", s.Stats().Parked, workers)
		}
		runtime.Gosched()
	}
	// Settle the runtime (GC, scavenger) so that only the scheduler's own
	// idle cost falls in the window.
	debug.FreeOSMemory()
	before, err := cpuTime()
	if err != nil {
		return 0, err
	}
	select { // the measurement window
	case <-time.After(window):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	after, err := cpuTime()
	if err != nil {
		return 0, err
	}
	return 100 * float64(after-before) / float64(window), nil
}
