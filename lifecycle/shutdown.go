package lifecycle

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/par"
)

// ErrStopTimeout: a graceful stop did not finish in time and the forced one
// was used.
var ErrStopTimeout = errors.New("lifecycle: graceful stop timed out")

// Runner is a component that works until ctx ends, then drains and returns.
type Runner interface {
	Run(ctx context.Context) error
}

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context) error

// Run calls f(ctx).
func (f RunnerFunc) Run(ctx context.Context) error { return f(ctx) }

var _ Runner = RunnerFunc(nil)

// Group runs runners concurrently under one context. When ctx ends or any
// runner returns a non-nil error, the others' context is cancelled. Group
// returns after every runner has returned, with the first non-nil error
// (nil when all returned nil).
func Group(ctx context.Context, runners ...Runner) error {
	g, ctx := par.NewGroup(ctx, len(runners))
	for _, r := range runners {
		g.Go(func() error { return r.Run(ctx) })
	}
	return g.Wait()
}

// StopWithin calls graceful and waits up to d for it to return; if it has
// not, it calls force and waits for both to return, then reports
// ErrStopTimeout. This is grpc.Server's GracefulStop/Stop pattern: the
// forced stop unblocks the graceful one.
func StopWithin(d time.Duration, graceful, force func()) error {
	done := make(chan struct{})
	go func() { graceful(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		force()
		<-done
		return ErrStopTimeout
	}
}

// Watchdog calls its function once, d after it was started, unless stopped
// first: the seed's "forced termination" safety net. Typical use arms it
// when shutdown begins with a function that exits the process.
type Watchdog struct {
	t *time.Timer
}

// StartWatchdog arms a watchdog that calls fire after d.
func StartWatchdog(d time.Duration, fire func()) *Watchdog {
	return &Watchdog{t: time.AfterFunc(d, fire)}
}

// Stop disarms the watchdog. It reports whether fire was prevented. Safe to
// call more than once and on a nil Watchdog.
func (w *Watchdog) Stop() bool {
	if w == nil {
		return false
	}
	return w.t.Stop()
}

// Stopper is a close-once signal: Stop may be called any number of times
// from any goroutine, Done is closed by the first call.
// The zero value is ready to use.
type Stopper struct {
	once sync.Once
	mu   sync.Mutex // protects ch's creation
	ch   chan struct{}
}

func (s *Stopper) chLocked() chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Done returns a channel closed once Stop has been called.
func (s *Stopper) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chLocked()
}

// Stop closes Done. Safe to call twice.
func (s *Stopper) Stop() {
	s.once.Do(func() {
		s.mu.Lock()
		close(s.chLocked())
		s.mu.Unlock()
	})
}

// Stopped reports whether Stop has been called.
func (s *Stopper) Stopped() bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// Step is one step of a bounded shutdown: Run gets at most Bound.
type Step struct {
	Name  string
	Bound time.Duration
	Run   func()
}

// RunSteps runs steps in order, each for at most its bound (seed 003's
// per-step timeouts): a step still running at its bound is cut off, that
// is, left running in its goroutine while the next step starts, and
// onCut (if set) is told. It returns the names of the steps cut off. A
// hang in one step therefore costs that step's bound, not the process;
// what a cut-off step leaves behind ends with the process (or a
// watchdog's exit).
func RunSteps(onCut func(s Step), steps ...Step) (cut []string) {
	for _, s := range steps {
		done := make(chan struct{})
		go func() { defer close(done); s.Run() }()
		t := time.NewTimer(s.Bound)
		select {
		case <-done:
			t.Stop()
		case <-t.C:
			cut = append(cut, s.Name)
			if onCut != nil {
				onCut(s)
			}
		}
	}
	return cut
}
