package sched

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fnProc is a Process made of functions; nil functions do nothing.
type fnProc struct {
	init  func(ctx context.Context, method string, input []any) error
	step  func(events []Event, out *StepOutput) error
	close func()
}

func (p *fnProc) Init(ctx context.Context, method string, input []any) error {
	if p.init != nil {
		return p.init(ctx, method, input)
	}
	return nil
}
func (p *fnProc) Step(events []Event, out *StepOutput) error { return p.step(events, out) }
func (p *fnProc) Close() {
	if p.close != nil {
		p.close()
	}
}

// exits collects OnExit reports; wait blocks until n have arrived.
type exits struct {
	mu   sync.Mutex
	errs map[PID]error
	ch   chan PID
}

func newExits(capacity int) *exits {
	return &exits{errs: map[PID]error{}, ch: make(chan PID, capacity)}
}

func (e *exits) onExit(pid PID, err error) {
	e.mu.Lock()
	e.errs[pid] = err
	e.mu.Unlock()
	e.ch <- pid
}

func (e *exits) wait(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for i := 0; i < n; i++ {
		select {
		case <-e.ch:
		case <-deadline:
			t.Fatalf("only %d of %d processes exited within %v", i, n, timeout)
		}
	}
}

func (e *exits) err(pid PID) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.errs[pid]
}

// start builds a scheduler and stops it when the test ends.
func start(t *testing.T, cfg Config) *Scheduler {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func mustSpawn(t *testing.T, s *Scheduler, p Process) PID {
	t.Helper()
	pid, err := s.Spawn(p, "main", nil)
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	return pid
}

func recv(t *testing.T, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}
