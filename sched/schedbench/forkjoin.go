package schedbench

import (
	"context"
	"sync"

	"github.com/gantryhq/gantry/sched"
)

// fibCalls is the number of calls (processes, goroutines) fib(n) makes when
// every call above the leaves forks two children: 2·fib(n+1) − 1.
func fibCalls(n int) int {
	a, b := 0, 1 // fib(0), fib(1)
	for i := 0; i < n+1; i++ {
		a, b = b, a+b
	}
	return 2*a - 1
}

// fibProc is one call of fib(n): it spawns its two children from inside its
// first Step (StepOutput.Spawn, so they go to the worker's deque), waits for
// their two answers and sends the sum to its parent.
type fibProc struct {
	n, sum, waiting int
	parent          sched.PID
}

func (f *fibProc) Init(context.Context, string, []any) error { return nil }
func (f *fibProc) Close()                                    {}

func (f *fibProc) Step(events []sched.Event, out *sched.StepOutput) error {
	out.Status = sched.StatusWaitMessages
	if events == nil { // the first step: fork
		if f.n < 2 {
			out.Send(f.parent, f.n)
			out.Status = sched.StatusDone
			return nil
		}
		self := out.Self()
		if _, err := out.Spawn(&fibProc{n: f.n - 1, parent: self}, "fib", nil); err != nil {
			return err
		}
		if _, err := out.Spawn(&fibProc{n: f.n - 2, parent: self}, "fib", nil); err != nil {
			return err
		}
		f.waiting = 2
		return nil
	}
	for i := range events {
		switch events[i].Type {
		case sched.EventCancel:
			out.Status = sched.StatusDone
			return nil
		case sched.EventMessage:
			f.sum += events[i].Data.(int)
			if f.waiting--; f.waiting == 0 { // join
				out.Send(f.parent, f.sum)
				out.Status = sched.StatusDone
			}
		}
	}
	return nil
}

// ForkJoin computes fib(n) with one process per call, children spawned
// inside Step; one op = one call. The result goes to a root process that
// closes the measurement.
func ForkJoin(workers, n int) (Sample, error) {
	s, err := sched.New(sched.Config{Workers: workers})
	if err != nil {
		return Sample{}, err
	}
	defer stop(s)
	done := make(chan int, 1)
	root, err := s.Spawn(proc(func(events []sched.Event, out *sched.StepOutput) error {
		out.Status = sched.StatusWaitMessages
		for i := range events {
			switch events[i].Type {
			case sched.EventMessage:
				done <- events[i].Data.(int)
				out.Status = sched.StatusDone
			case sched.EventCancel:
				out.Status = sched.StatusDone
			}
		}
		return nil
	}), "root", nil)
	if err != nil {
		return Sample{}, err
	}
	want := fib(n)
	return measure(fibCalls(n), func() error {
		if _, err := s.Spawn(&fibProc{n: n, parent: root}, "fib", nil); err != nil {
			return err
		}
		waited := make(chan struct{})
		var got int
		go func() { got = <-done; close(waited) }()
		if err := waitOrTimeout(waited); err != nil {
			return err
		}
		if got != want {
			return errWrongAnswer
		}
		return nil
	})
}

// GoForkJoin is ForkJoin's baseline: one goroutine per call, each joining
// its two children with a WaitGroup.
func GoForkJoin(n int) (Sample, error) {
	want := fib(n)
	return measure(fibCalls(n), func() error {
		if goFib(n) != want {
			return errWrongAnswer
		}
		return nil
	})
}

func goFib(n int) int {
	if n < 2 {
		return n
	}
	var a, b int
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { a = goFib(n - 1); wg.Done() }()
	go func() { b = goFib(n - 2); wg.Done() }()
	wg.Wait()
	return a + b
}

func fib(n int) int {
	a, b := 0, 1
	for i := 0; i < n; i++ {
		a, b = b, a+b
	}
	return a
}
