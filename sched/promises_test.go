package sched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The tests in this file pin the promises a review of the first scheduler
// (before it was made work-conserving) found broken; they use only the API
// that existed before, so each was run against the old code once (all
// failed there) and passes now.

// TestReadyProcessBehindLongStepIsStolen: A's step wakes L (L becomes
// runnext) and A continues, so A waits on the deque while L's step is long.
// L's step waits until A has run again: only the other worker, parked when
// this starts, can run A. The wake-up must come from the push itself (the
// wakep rule), not from a timer: no wall-clock bound is asserted, a lost
// wake-up is a 10 s timeout.
func TestReadyProcessBehindLongStepIsStolen(t *testing.T) {
	s := start(t, Config{Workers: 2})
	aRan := make(chan struct{})
	var lPID PID
	long := &fnProc{step: func(events []Event, out *StepOutput) error {
		out.Status = StatusWaitMessages
		for _, ev := range events {
			switch ev.Type {
			case EventMessage:
				select {
				case <-aRan:
				case <-time.After(10 * time.Second):
					return errors.New("A was never run while L's step was long")
				}
			case EventCancel:
				out.Status = StatusDone
			}
		}
		return nil
	}}
	aSteps := 0
	a := &fnProc{step: func(events []Event, out *StepOutput) error {
		out.Status = StatusWaitMessages
		if cancelledEvents(events) {
			out.Status = StatusDone
			return nil
		}
		switch {
		case len(events) > 0 && aSteps == 0:
			aSteps++
			out.Send(lPID, "be long") // L → runnext
			out.Status = StatusContinue
		case aSteps == 1:
			aSteps++
			close(aRan)
		}
		return nil
	}}
	lPID = mustSpawn(t, s, long)
	aPID := mustSpawn(t, s, a)
	waitFor(t, "both processes idle and both workers parked", func() bool {
		st := s.Stats()
		return st.Idle == 2 && st.Parked == 2
	})
	before := s.Stats().Wakeups
	if err := s.Send(aPID, "go"); err != nil {
		t.Fatal(err)
	}
	recv(t, aRan, 10*time.Second, "A, queued behind L's long step, to run on the other worker")
	if got := s.Stats().Wakeups - before; got < 2 {
		t.Fatalf("%d wake-ups, want 2 (one for Send, one for A queued behind L)", got)
	}
}

// TestStopReturnsByDeadlineWithAStuckStep runs in a synctest bubble: a step
// blocks on a channel nobody closes until Stop has returned. Stop must return
// at its 500 ms deadline (exactly, in fake time), report the stuck worker,
// and the worker must complete the process once its step returns.
func TestStopReturnsByDeadlineWithAStuckStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ex := newExits(4)
		s, err := New(Config{Workers: 2, OnExit: ex.onExit})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		inStep := make(chan struct{})
		stuck := mustSpawn(t, s, &fnProc{step: func(_ []Event, out *StepOutput) error {
			close(inStep)
			<-release
			out.Status = StatusWaitMessages
			return nil
		}})
		stubborn := mustSpawn(t, s, &fnProc{step: func(_ []Event, out *StepOutput) error {
			out.Status = StatusWaitMessages // ignores EventCancel
			return nil
		}})
		<-inStep
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		err = s.Stop(ctx)
		if el := time.Since(t0); el != 500*time.Millisecond {
			t.Errorf("Stop took %v of fake time, want exactly its 500ms deadline", el)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), stuck.String()) {
			t.Errorf("Stop: %v, want DeadlineExceeded naming the stuck process %v", err, stuck)
		}
		ex.wait(t, 1, time.Minute)
		if err := ex.err(stubborn); !errors.Is(err, ErrStopped) {
			t.Errorf("stubborn process exited with %v, want ErrStopped", err)
		}
		close(release)
		ex.wait(t, 1, time.Minute)
		if err := ex.err(stuck); !errors.Is(err, ErrStopped) {
			t.Errorf("stuck process exited with %v, want ErrStopped", err)
		}
		synctest.Wait() // the abandoned worker has exited
	})
}

// TestFirstStepGetsNilEvenAfterImmediateSend: the first Step gets nil
// events even when a message was sent right after Spawn; the message comes
// in the second step, and a later step with nothing new gets a non-nil
// empty slice, so events == nil means "first step" and nothing else.
func TestFirstStepGetsNilEvenAfterImmediateSend(t *testing.T) {
	const trials = 300
	type result struct {
		first, second, third []Event
	}
	results := make(chan result, trials)
	s := start(t, Config{Workers: 2})
	for i := 0; i < trials; i++ {
		var r result
		n := 0
		pid := mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
			n++
			out.Status = StatusWaitMessages
			switch n {
			case 1:
				r.first = events
			case 2:
				r.second = append([]Event{}, events...)
				out.Status = StatusContinue
			case 3:
				r.third = events
				results <- r
				out.Status = StatusDone
			}
			return nil
		}})
		if err := s.Send(pid, i); err != nil {
			t.Fatal(err)
		}
	}
	bad := 0
	var first string
	for i := 0; i < trials; i++ {
		var r result
		select {
		case r = <-results:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d processes reached their third step", i, trials)
		}
		if r.first != nil || len(r.second) != 1 || r.second[0].Type != EventMessage || r.third == nil || len(r.third) != 0 {
			if bad++; bad == 1 {
				first = fmt.Sprintf("first %v, second %v, third %v (nil: %v)", r.first, r.second, r.third, r.third == nil)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d processes broke the contract (want nil, [message], non-nil empty); first: %s", bad, trials, first)
	}
}

// TestCancelCancelsTheContextHandlersGet: a handler hands its yield to a
// goroutine that waits for ctx to end; Cancel must end it, so the yield
// completes with context.Canceled.
func TestCancelCancelsTheContextHandlersGet(t *testing.T) {
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	h := HandlerFunc(func(ctx context.Context, _ Command, tag uint64, c Completer) error {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				c.CompleteYield(tag, nil, ctx.Err())
			case <-time.After(10 * time.Second):
				c.CompleteYield(tag, nil, errors.New("handler context never ended"))
			}
		}()
		return nil
	})
	ex := newExits(1)
	s := start(t, Config{Workers: 2, OnExit: ex.onExit, Handlers: map[CommandType]Handler{7: h}})
	blocked := make(chan struct{})
	pid := mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
		if events == nil {
			out.Yield(1, cmd(7))
			out.Status = StatusWaitYields
			close(blocked)
			return nil
		}
		out.Status = StatusWaitYields
		for _, ev := range events {
			if ev.Type == EventYieldComplete {
				out.Status = StatusDone
				return ev.Error
			}
		}
		return nil
	}})
	recv(t, blocked, 10*time.Second, "the yield")
	if err := s.Cancel(pid); err != nil {
		t.Fatal(err)
	}
	ex.wait(t, 1, 20*time.Second)
	if err := ex.err(pid); !errors.Is(err, context.Canceled) {
		t.Fatalf("process exited with %v, want the yield to fail with context.Canceled", err)
	}
}

// TestOnExitPanicIsRecoveredAndReported: a panicking OnExit is logged and the
// scheduler keeps running processes.
func TestOnExitPanicIsRecoveredAndReported(t *testing.T) {
	logs := &recordingHandler{}
	done := make(chan PID, 2)
	s := start(t, Config{Workers: 1, Logger: slog.New(logs), OnExit: func(pid PID, _ error) {
		done <- pid
		panic("exit boom")
	}})
	finish := func(_ []Event, out *StepOutput) error { out.Status = StatusDone; return nil }
	a := mustSpawn(t, s, &fnProc{step: finish})
	if got := <-done; got != a {
		t.Fatalf("OnExit(%v), want %v", got, a)
	}
	b := mustSpawn(t, s, &fnProc{step: finish})
	select {
	case got := <-done:
		if got != b {
			t.Fatalf("OnExit(%v), want %v", got, b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not survive a panicking OnExit")
	}
	waitFor(t, "two OnExit panics logged", func() bool { return logs.count("OnExit panicked") == 2 })
}

// TestYieldCompletesExactlyOnce: handlers that complete and then fail,
// complete and then panic, or complete twice still produce one completion
// per yield; a handler that only fails produces exactly its error.
func TestYieldCompletesExactlyOnce(t *testing.T) {
	errHandler := errors.New("handler failed")
	handlers := map[CommandType]Handler{
		1: HandlerFunc(func(_ context.Context, _ Command, tag uint64, c Completer) error {
			c.CompleteYield(tag, "ok", nil)
			return errHandler
		}),
		2: HandlerFunc(func(_ context.Context, _ Command, tag uint64, c Completer) error {
			c.CompleteYield(tag, "ok", nil)
			panic("after completing")
		}),
		3: HandlerFunc(func(_ context.Context, _ Command, tag uint64, c Completer) error {
			c.CompleteYield(tag, "ok", nil)
			c.CompleteYield(tag, "again", nil)
			return nil
		}),
		4: HandlerFunc(func(context.Context, Command, uint64, Completer) error { return errHandler }),
	}
	got := make(chan []Event, 1)
	s := start(t, Config{Workers: 2, Handlers: handlers})
	var all []Event
	mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
		out.Status = StatusWaitYields
		if events == nil {
			for tag := uint64(1); tag <= 4; tag++ {
				out.Yield(tag, cmd(tag))
			}
			return nil
		}
		all = append(all, events...)
		if len(all) >= 4 {
			// One more inline yield: every duplicate the handlers made
			// was queued before this step, so it would be in all now.
			out.Yield(5, cmd(3))
		}
		for _, ev := range events {
			if ev.Tag == 5 {
				got <- all
				out.Status = StatusDone
			}
		}
		return nil
	}})
	var evs []Event
	select {
	case evs = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the process never got its completions")
	}
	count := map[uint64]int{}
	for _, ev := range evs {
		if ev.Type == EventYieldComplete && ev.Tag <= 4 {
			count[ev.Tag]++
			want := "ok"
			if ev.Tag == 4 {
				if !errors.Is(ev.Error, errHandler) {
					t.Errorf("tag 4: error %v, want %v", ev.Error, errHandler)
				}
				continue
			}
			if ev.Data != want || ev.Error != nil {
				t.Errorf("tag %d: (%v, %v), want (%v, nil)", ev.Tag, ev.Data, ev.Error, want)
			}
		}
	}
	for tag := uint64(1); tag <= 4; tag++ {
		if count[tag] != 1 {
			t.Errorf("tag %d completed %d times, want exactly once (all: %v)", tag, count[tag], count)
		}
	}
}

type cmd CommandType

func (c cmd) CommandType() CommandType { return CommandType(c) }

// recordingHandler is a slog.Handler that keeps every message.
type recordingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }
func (h *recordingHandler) count(sub string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

// waitFor polls cond, yielding the thread between polls, until it holds,
// failing after 10 s. It waits for a state; it neither sleeps nor measures
// time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}
