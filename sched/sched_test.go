package sched

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// forEachProcs runs f under GOMAXPROCS 1 and 2 (restored afterwards).
func forEachProcs(t *testing.T, f func(t *testing.T)) {
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			f(t)
		})
	}
}

// TestPingPongDeliversEveryMessageOnceInOrder: two processes bounce a counter
// with out.Send; each checks it receives exactly the next value.
func TestPingPongDeliversEveryMessageOnceInOrder(t *testing.T) {
	const rounds = 20000
	forEachProcs(t, func(t *testing.T) {
		for _, workers := range []int{1, 2} {
			t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
				ex := newExits(2)
				s := start(t, Config{Workers: workers, OnExit: ex.onExit})
				var errs []error
				var mu sync.Mutex
				fail := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }

				// player returns one side of the rally. It expects first,
				// first+2, …; on n it sends n+1, and finishes once the ball
				// has reached rounds.
				player := func(first int, serveTo *PID) *fnProc {
					want := first
					return &fnProc{step: func(events []Event, out *StepOutput) error {
						out.Status = StatusWaitMessages
						if events == nil && serveTo != nil {
							out.Send(*serveTo, 0)
						}
						for _, ev := range events {
							if ev.Type == EventCancel {
								return errors.New("cancelled before the rally ended")
							}
							n := ev.Data.(int)
							if n != want {
								fail(fmt.Errorf("player %d got %d, want %d", first, n, want))
							}
							want = n + 2
							if n < rounds {
								out.Send(ev.From, n+1)
							}
							if n+1 >= rounds {
								out.Status = StatusDone
							}
						}
						return nil
					}}
				}
				pong := mustSpawn(t, s, player(0, nil))
				pinger := player(1, &pong)
				mustSpawn(t, s, pinger)
				ex.wait(t, 2, 30*time.Second)
				if len(errs) > 0 {
					t.Fatalf("%d ordering errors, first: %v", len(errs), errs[0])
				}
				if st := s.Stats(); st.Undeliverable != 0 {
					t.Fatalf("undeliverable = %d", st.Undeliverable)
				}
			})
		}
	})
}

// TestFanOutDeliversExactlyOnce: one process sends to 1000 waiting
// receivers, each acknowledges with its index; and the test goroutine does
// the same through Scheduler.Send.
func TestFanOutDeliversExactlyOnce(t *testing.T) {
	const n = 1000
	for _, via := range []string{"out.Send", "Scheduler.Send"} {
		t.Run(via, func(t *testing.T) {
			forEachProcs(t, func(t *testing.T) {
				ex := newExits(n + 1)
				s := start(t, Config{Workers: 2, OnExit: ex.onExit})
				acks := make([]atomic.Int32, n)
				done := make(chan struct{})
				got := 0
				hub := &fnProc{step: func(events []Event, out *StepOutput) error {
					out.Status = StatusWaitMessages
					for _, ev := range events {
						if ev.Type == EventMessage {
							acks[ev.Data.(int)].Add(1)
							got++
						}
					}
					if got == n {
						close(done)
						out.Status = StatusDone
					}
					return nil
				}}
				hubPID := mustSpawn(t, s, hub)
				pids := make([]PID, n)
				for i := range pids {
					i := i
					pids[i] = mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
						out.Status = StatusWaitMessages
						for _, ev := range events {
							if ev.Type == EventMessage {
								if ev.Data.(int) != i {
									return fmt.Errorf("receiver %d got %v", i, ev.Data)
								}
								out.Send(hubPID, i)
								out.Status = StatusDone
							}
						}
						return nil
					}})
				}
				if via == "Scheduler.Send" {
					for i, pid := range pids {
						if err := s.Send(pid, i); err != nil {
							ex.mu.Lock()
							exitErr, exited := ex.errs[pid]
							ex.mu.Unlock()
							t.Fatalf("Send to receiver %d: %v (exited: %v, with %v)", i, err, exited, exitErr)
						}
					}
				} else {
					mustSpawn(t, s, &fnProc{step: func(_ []Event, out *StepOutput) error {
						for i, pid := range pids {
							out.Send(pid, i)
						}
						out.Status = StatusDone
						return nil
					}})
				}
				recv(t, done, 30*time.Second, "all acknowledgements")
				ex.wait(t, n+1, 30*time.Second)
				bad := map[int]int32{}
				for i := range acks {
					if c := acks[i].Load(); c != 1 {
						bad[i] = c
					}
				}
				if diff := cmp.Diff(map[int]int32{}, bad); diff != "" {
					t.Fatalf("acks not exactly once (index: count):\n%s", diff)
				}
				for _, pid := range pids {
					if err := ex.err(pid); err != nil {
						t.Fatalf("receiver %d: %v", pid, err)
					}
				}
			})
		})
	}
}

type testCmd struct {
	typ CommandType
	n   int
}

func (c testCmd) CommandType() CommandType { return c.typ }

const (
	cmdSync  CommandType = 1 // completes inside Handle, while the process is Running
	cmdAsync CommandType = 2 // completes from a new goroutine, racing the transition
	cmdFail  CommandType = 3 // Handle returns an error
	cmdPanic CommandType = 4 // Handle panics
)

var errHandler = errors.New("handler says no")

func testHandlers() map[CommandType]Handler {
	return map[CommandType]Handler{
		cmdSync: HandlerFunc(func(_ context.Context, cmd Command, tag uint64, c Completer) error {
			c.CompleteYield(tag, cmd.(testCmd).n*2, nil)
			return nil
		}),
		cmdAsync: HandlerFunc(func(_ context.Context, cmd Command, tag uint64, c Completer) error {
			go c.CompleteYield(tag, cmd.(testCmd).n*2, nil)
			return nil
		}),
		cmdFail: HandlerFunc(func(context.Context, Command, uint64, Completer) error {
			return errHandler
		}),
		cmdPanic: HandlerFunc(func(context.Context, Command, uint64, Completer) error {
			panic("handler panic")
		}),
	}
}

// yielder yields total commands of random types, one to three per step, and
// checks that every tag completes exactly once with the right result.
func yielder(seed uint64, total int) *fnProc {
	rng := rand.New(rand.NewPCG(seed, 7))
	pending := map[uint64]testCmd{}
	var nextTag uint64
	issued := 0
	return &fnProc{step: func(events []Event, out *StepOutput) error {
		for _, ev := range events {
			if ev.Type != EventYieldComplete {
				return fmt.Errorf("unexpected event %v", ev.Type)
			}
			c, ok := pending[ev.Tag]
			if !ok {
				return fmt.Errorf("completion for tag %d not pending (duplicate or unknown)", ev.Tag)
			}
			delete(pending, ev.Tag)
			switch c.typ {
			case cmdSync, cmdAsync:
				if ev.Error != nil || ev.Data != c.n*2 {
					return fmt.Errorf("tag %d: got (%v, %v), want (%d, nil)", ev.Tag, ev.Data, ev.Error, c.n*2)
				}
			case cmdFail:
				if !errors.Is(ev.Error, errHandler) {
					return fmt.Errorf("tag %d: error %v, want %v", ev.Tag, ev.Error, errHandler)
				}
			case cmdPanic:
				var pe *PanicError
				if !errors.As(ev.Error, &pe) {
					return fmt.Errorf("tag %d: error %v, want a *PanicError", ev.Tag, ev.Error)
				}
			default: // no handler registered
				if !errors.Is(ev.Error, ErrNoHandler) {
					return fmt.Errorf("tag %d: error %v, want %v", ev.Tag, ev.Error, ErrNoHandler)
				}
			}
		}
		for k := 1 + rng.IntN(3); k > 0 && issued < total; k-- {
			typ := []CommandType{cmdSync, cmdAsync, cmdAsync, cmdFail, cmdPanic, 99}[rng.IntN(6)]
			nextTag++
			c := testCmd{typ: typ, n: issued}
			pending[nextTag] = c
			out.Yield(nextTag, c)
			issued++
		}
		if issued == total && len(pending) == 0 {
			out.Status = StatusDone
			return nil
		}
		out.Status = StatusWaitYields
		return nil
	}}
}

// TestYieldCompletionsRacingWithRunning: completions arrive inside Handle
// (process Running, wake flag path), from goroutines (racing the worker's
// Running → Blocked transition: the lost wake-up of the original runtime),
// as handler errors, panics and missing handlers. Every yield must complete
// exactly once and every process must finish.
func TestYieldCompletionsRacingWithRunning(t *testing.T) {
	iters := 5
	if testing.Short() {
		iters = 1
	}
	forEachProcs(t, func(t *testing.T) {
		for it := 0; it < iters; it++ {
			const procs, yields = 50, 200
			ex := newExits(procs)
			s := start(t, Config{Workers: 2, Handlers: testHandlers(), OnExit: ex.onExit})
			pids := make([]PID, procs)
			for i := range pids {
				pids[i] = mustSpawn(t, s, yielder(uint64(it*procs+i), yields))
			}
			ex.wait(t, procs, 60*time.Second)
			for _, pid := range pids {
				if err := ex.err(pid); err != nil {
					t.Fatalf("process %d: %v", pid, err)
				}
			}
		}
	})
}

// TestManySendersToOneWaitingProcess: several goroutines Send to a process
// that keeps going back to waiting, so deliveries land in every state
// (Idle, Ready, Running with and without the wake flag). Like the original
// runtime's PR #325 reproduction, the GOMAXPROCS=1 run with -race explores
// many interleavings; a lost wake-up shows up as a timeout.
func TestManySendersToOneWaitingProcess(t *testing.T) {
	const senders, each = 4, 3000
	forEachProcs(t, func(t *testing.T) {
		ex := newExits(1)
		s := start(t, Config{Workers: 2, OnExit: ex.onExit})
		got := 0
		pid := mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
			for _, ev := range events {
				if ev.Type == EventMessage {
					got++
				}
			}
			out.Status = StatusWaitMessages
			if got == senders*each {
				out.Status = StatusDone
			}
			return nil
		}})
		var wg sync.WaitGroup
		for i := 0; i < senders; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < each; j++ {
					if err := s.Send(pid, j); err != nil {
						t.Errorf("Send: %v", err)
						return
					}
					if j%16 == 0 {
						runtime.Gosched()
					}
				}
			}()
		}
		wg.Wait()
		ex.wait(t, 1, 30*time.Second)
		if got != senders*each {
			t.Fatalf("received %d messages, want %d", got, senders*each)
		}
	})
}

// TestWakesParkedWorkers: a message sent from outside while every worker is
// parked (or just parking) must wake one: pair 2 of the README. Half the
// rounds wait until both workers are parked before sending; a lost wake-up
// is a timeout.
func TestWakesParkedWorkers(t *testing.T) {
	const rounds = 300
	forEachProcs(t, func(t *testing.T) {
		s := start(t, Config{Workers: 2})
		replies := make(chan int, 1)
		pid := mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
			out.Status = StatusWaitMessages
			for _, ev := range events {
				switch ev.Type {
				case EventMessage:
					replies <- ev.Data.(int)
				case EventCancel:
					out.Status = StatusDone
				}
			}
			return nil
		}})
		for i := 0; i < rounds; i++ {
			if i%2 == 0 {
				deadline := time.Now().Add(10 * time.Second)
				for s.nparked.Load() != 2 {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: workers never parked (%d of 2)", i, s.nparked.Load())
					}
					runtime.Gosched()
				}
			}
			if err := s.Send(pid, i); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-replies:
				if got != i {
					t.Fatalf("round %d: reply %d", i, got)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: no reply: lost wake-up (stats %+v)", i, s.Stats())
			}
		}
		if st := s.Stats(); st.Parks == 0 || st.Wakeups == 0 {
			t.Fatalf("park path not exercised: %+v", st)
		}
	})
}

// TestIdleWorkerStealsFromBusyWorker: one process wakes ten others on its
// worker; the first of them to run blocks its worker until the other nine
// have run, which can only happen if the other worker steals them.
func TestIdleWorkerStealsFromBusyWorker(t *testing.T) {
	forEachProcs(t, func(t *testing.T) {
		const n = 10
		s := start(t, Config{Workers: 2})
		var blocker atomic.Bool
		release := make(chan struct{})
		ran := make(chan struct{}, n)
		waiting := make(chan struct{}, n)
		pids := make([]PID, n)
		for i := range pids {
			pids[i] = mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
				out.Status = StatusWaitMessages
				if events == nil {
					waiting <- struct{}{}
					return nil
				}
				out.Status = StatusDone
				if blocker.CompareAndSwap(false, true) {
					select {
					case <-release:
					case <-time.After(20 * time.Second):
						return errors.New("never released")
					}
					return nil
				}
				ran <- struct{}{}
				return nil
			}})
		}
		for i := 0; i < n; i++ {
			recv(t, waiting, 10*time.Second, "receivers to wait")
		}
		mustSpawn(t, s, &fnProc{step: func(_ []Event, out *StepOutput) error {
			for _, pid := range pids {
				out.Send(pid, "go")
			}
			out.Status = StatusDone
			return nil
		}})
		for i := 0; i < n-1; i++ {
			recv(t, ran, 10*time.Second, fmt.Sprintf("receiver %d of %d while one worker is blocked", i+1, n-1))
		}
		close(release)
		if st := s.Stats(); st.Steals == 0 || st.StealOps == 0 {
			t.Fatalf("no steals recorded: %+v", st)
		}
	})
}
