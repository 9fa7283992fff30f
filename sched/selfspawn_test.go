package sched

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestSelfInInitStepAndHandler: the process learns its PID from the ctx of
// Init, from out.Self and from the ctx its handler gets.
func TestSelfInInitStepAndHandler(t *testing.T) {
	type seen struct{ init, step, handler PID }
	got := make(chan seen, 1)
	var sn seen
	h := HandlerFunc(func(ctx context.Context, _ Command, tag uint64, c Completer) error {
		sn.handler = Self(ctx)
		c.CompleteYield(tag, nil, nil)
		return nil
	})
	s := start(t, Config{Workers: 1, Handlers: map[CommandType]Handler{1: h}})
	pid := mustSpawn(t, s, &fnProc{
		init: func(ctx context.Context, _ string, _ []any) error { sn.init = Self(ctx); return nil },
		step: func(events []Event, out *StepOutput) error {
			if events == nil {
				sn.step = out.Self()
				if Self(out.Context()) != out.Self() {
					t.Error("Self(out.Context()) != out.Self()")
				}
				out.Yield(1, cmd(1))
				out.Status = StatusWaitYields
				return nil
			}
			got <- sn
			out.Status = StatusDone
			return nil
		},
	})
	select {
	case g := <-got:
		if g != (seen{pid, pid, pid}) {
			t.Fatalf("Self: %+v, want %v everywhere", g, pid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("process never finished")
	}
	if Self(t.Context()) != 0 {
		t.Fatal("Self of a foreign context is not 0")
	}
}

// TestStepSpawnGoesToTheLocalDeque: with one worker, children spawned inside
// a step never pass through the global queue (only the parent does).
func TestStepSpawnGoesToTheLocalDeque(t *testing.T) {
	const children = 20
	ex := newExits(children + 1)
	s := start(t, Config{Workers: 1, OnExit: ex.onExit})
	child := func() *fnProc {
		return &fnProc{step: func(_ []Event, out *StepOutput) error { out.Status = StatusDone; return nil }}
	}
	mustSpawn(t, s, &fnProc{step: func(_ []Event, out *StepOutput) error {
		for i := 0; i < children; i++ {
			if _, err := out.Spawn(child(), "child", nil); err != nil {
				return err
			}
		}
		out.Status = StatusDone
		return nil
	}})
	ex.wait(t, children+1, 10*time.Second)
	if st := s.Stats(); st.GlobalPops != 1 || st.Spawned != children+1 {
		t.Fatalf("global pops %d, spawned %d; want 1 (the parent) and %d", st.GlobalPops, st.Spawned, children+1)
	}
}

// TestForkJoinFib computes fib(18) with one process per call, children
// spawned inside Step and answering their parent by PID.
func TestForkJoinFib(t *testing.T) {
	for _, workers := range []int{1, 2} {
		s := start(t, Config{Workers: workers})
		res := make(chan int, 1)
		root := mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
			out.Status = StatusWaitMessages
			for _, ev := range events {
				if ev.Type == EventMessage {
					res <- ev.Data.(int)
					out.Status = StatusDone
				}
			}
			return nil
		}})
		if _, err := s.Spawn(newFibProc(18, root), "fib", nil); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-res:
			if got != 2584 {
				t.Fatalf("workers=%d: fib(18) = %d, want 2584", workers, got)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("workers=%d: fib never answered", workers)
		}
	}
}

type fibProc struct {
	n, sum, waiting int
	parent          PID
}

func newFibProc(n int, parent PID) *fibProc { return &fibProc{n: n, parent: parent} }

func (f *fibProc) Init(context.Context, string, []any) error { return nil }
func (f *fibProc) Close()                                    {}
func (f *fibProc) Step(events []Event, out *StepOutput) error {
	if events == nil {
		if f.n < 2 {
			out.Send(f.parent, f.n)
			out.Status = StatusDone
			return nil
		}
		for _, n := range []int{f.n - 1, f.n - 2} {
			if _, err := out.Spawn(newFibProc(n, out.Self()), "fib", nil); err != nil {
				return err
			}
		}
		f.waiting = 2
		out.Status = StatusWaitMessages
		return nil
	}
	out.Status = StatusWaitMessages
	for _, ev := range events {
		if ev.Type == EventMessage {
			f.sum += ev.Data.(int)
			if f.waiting--; f.waiting == 0 {
				out.Send(f.parent, f.sum)
				out.Status = StatusDone
			}
		}
	}
	return nil
}

// TestSendToAProcessThatFinishesCountsTheDrop: Send returns nil while the
// target is Running (the message is queued); the target's step then
// finishes without another step, so the message is counted as dropped. Once
// the process is gone Send says ErrNoProcess.
func TestSendToAProcessThatFinishesCountsTheDrop(t *testing.T) {
	ex := newExits(1)
	s := start(t, Config{Workers: 1, OnExit: ex.onExit})
	inStep, release := make(chan struct{}), make(chan struct{})
	pid := mustSpawn(t, s, &fnProc{step: func(_ []Event, out *StepOutput) error {
		close(inStep)
		<-release
		out.Status = StatusDone
		return nil
	}})
	recv(t, inStep, 10*time.Second, "the step")
	if err := s.Send(pid, "late"); err != nil {
		t.Fatalf("Send to a running process: %v", err)
	}
	close(release)
	ex.wait(t, 1, 10*time.Second)
	if st := s.Stats(); st.Dropped != 1 {
		t.Fatalf("Dropped = %d, want 1", st.Dropped)
	}
	if err := s.Send(pid, "later"); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("Send after exit: %v, want ErrNoProcess", err)
	}
}

// TestStopReportsTheStuckWorker: the error wraps ErrStuck and the worker is
// counted as abandoned.
func TestStopReportsTheStuckWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(Config{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		mustSpawn(t, s, &fnProc{step: func(_ []Event, out *StepOutput) error {
			<-release
			out.Status = StatusDone
			return nil
		}})
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := s.Stop(ctx); !errors.Is(err, ErrStuck) {
			t.Fatalf("Stop: %v, want ErrStuck", err)
		}
		if st := s.Stats(); st.Abandoned != 1 {
			t.Fatalf("Abandoned = %d, want 1", st.Abandoned)
		}
		close(release)
		synctest.Wait()
	})
}

// TestProcessContextEndsWithTheProcess: the context Init got is live while
// the process runs and cancelled once it completed.
func TestProcessContextEndsWithTheProcess(t *testing.T) {
	ex := newExits(1)
	s := start(t, Config{Workers: 1, OnExit: ex.onExit})
	var ctx context.Context
	mustSpawn(t, s, &fnProc{
		init: func(c context.Context, _ string, _ []any) error {
			ctx = c
			if c.Err() != nil {
				t.Error("context cancelled during Init")
			}
			return nil
		},
		step: func(_ []Event, out *StepOutput) error { out.Status = StatusDone; return nil },
	})
	ex.wait(t, 1, 10*time.Second)
	select {
	case <-ctx.Done():
	default:
		t.Fatal("context still open after the process completed")
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("Err = %v", ctx.Err())
	}
}

// TestProcessContextDoneRacingCancel: Done and cancel from several
// goroutines at once; the channel is closed exactly once (a second close
// would panic) and every caller sees it closed.
func TestProcessContextDoneRacingCancel(t *testing.T) {
	for i := 0; i < 500; i++ {
		c := &procCtx{pid: 1}
		var wg sync.WaitGroup
		chans := make([]<-chan struct{}, 3)
		for g := range chans {
			wg.Add(1)
			go func() { defer wg.Done(); chans[g] = c.Done() }()
		}
		wg.Add(2)
		go func() { defer wg.Done(); c.cancel() }()
		go func() { defer wg.Done(); c.cancel() }()
		wg.Wait()
		for _, ch := range append(chans, c.Done()) {
			select {
			case <-ch:
			default:
				t.Fatalf("trial %d: a Done channel is open after cancel", i)
			}
		}
		if c.Err() != context.Canceled {
			t.Fatalf("Err = %v", c.Err())
		}
	}
}
