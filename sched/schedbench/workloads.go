// Package schedbench holds the scheduler's benchmark workloads and their
// goroutines-and-channels baselines, so that `go test -bench` (the
// benchmarks of package sched) and `gantry sched bench` measure exactly the same code.
//
// Every workload runs a fixed number of operations and returns a Sample:
// wall time and heap allocations for the whole run. The files:
//
//	workloads.go    Sample; ping-pong, spawn-to-done, fan-out and yield, each with its baseline
//	forkjoin.go     fork-join fib(n), children spawned inside Step, against goroutines+WaitGroup
//	idle_unix.go    IdleCPU: the CPU an idle scheduler uses over a window (idle_other.go: an error, no getrusage)
//	run.go          Options, Row and Run: every workload on 1 and 2 workers, medians, goals
package schedbench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/sched"
)

// Sample is one measured run of a workload.
type Sample struct {
	Ops     int           // operations done (round trips, spawns, messages…)
	Elapsed time.Duration // wall time of the measured part
	Allocs  uint64        // heap allocations during the measured part
	// CPU is the whole process's user+system CPU time during the measured
	// part (0 where getrusage is missing). Unlike Elapsed it hardly grows
	// when other programs take the cores, so it shows the cost on a loaded
	// machine; it includes the workers' spinning.
	CPU time.Duration
}

// CPUPerOp returns nanoseconds of process CPU time per operation.
func (s Sample) CPUPerOp() float64 { return float64(s.CPU.Nanoseconds()) / float64(s.Ops) }

// PerOp returns nanoseconds per operation.
func (s Sample) PerOp() float64 { return float64(s.Elapsed.Nanoseconds()) / float64(s.Ops) }

// PerSecond returns operations per second.
func (s Sample) PerSecond() float64 { return float64(s.Ops) / s.Elapsed.Seconds() }

// AllocsPerOp returns heap allocations per operation.
func (s Sample) AllocsPerOp() float64 { return float64(s.Allocs) / float64(s.Ops) }

// measure runs f between two allocation counts and two clock reads.
func measure(ops int, f func() error) (Sample, error) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0, cerr0 := cpuTime()
	t0 := time.Now()
	err := f()
	el := time.Since(t0)
	c1, cerr1 := cpuTime()
	runtime.ReadMemStats(&m1)
	var cpu time.Duration
	if cerr0 == nil && cerr1 == nil {
		cpu = c1 - c0
	}
	return Sample{Ops: ops, Elapsed: el, Allocs: m1.Mallocs - m0.Mallocs, CPU: cpu}, err
}

var (
	errTimeout     = errors.New("schedbench: workload did not finish within a minute")
	errWrongAnswer = errors.New("schedbench: fork-join computed the wrong result")
)

// waitOrTimeout turns a stuck scheduler into an error instead of a hang.
func waitOrTimeout(done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-time.After(time.Minute):
		return errTimeout
	}
}

func stop(s *sched.Scheduler) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Stop(ctx)
}

// proc is a Process made of a step function.
type proc func(events []sched.Event, out *sched.StepOutput) error

func (p proc) Init(context.Context, string, []any) error              { return nil }
func (p proc) Step(events []sched.Event, out *sched.StepOutput) error { return p(events, out) }
func (p proc) Close()                                                 {}

// ball is the message payload: a pointer, so putting it in an `any` does
// not allocate and the figures show the scheduler's own allocations.
type ball struct{}

var theBall = &ball{}

// echo answers every message with the ball and ends on cancel.
var echo = proc(func(events []sched.Event, out *sched.StepOutput) error {
	out.Status = sched.StatusWaitMessages
	for i := range events {
		switch events[i].Type {
		case sched.EventMessage:
			out.Send(events[i].From, theBall)
		case sched.EventCancel:
			out.Status = sched.StatusDone
		}
	}
	return nil
})

// measureDriven spawns driver and measures ops operations: from the go
// signal (a nil message to driver) until driver closes done.
func measureDriven(s *sched.Scheduler, name string, driver proc, ops int, done <-chan struct{}) (Sample, error) {
	pid, err := s.Spawn(driver, name, nil)
	if err != nil {
		return Sample{}, err
	}
	return measure(ops, func() error {
		if err := s.Send(pid, nil); err != nil {
			return err
		}
		return waitOrTimeout(done)
	})
}

// PingPong bounces a message between two processes n times (one op = one
// round trip = two deliveries and two steps) on a scheduler with workers
// workers, and returns the measured part: from the first send to the last
// receive, excluding scheduler start and stop.
func PingPong(workers, n int) (Sample, error) {
	s, err := sched.New(sched.Config{Workers: workers})
	if err != nil {
		return Sample{}, err
	}
	defer stop(s)
	done := make(chan struct{})
	// The ponger replies to every ball; the pinger counts round trips.
	pong, err := s.Spawn(echo, "pong", nil)
	if err != nil {
		return Sample{}, err
	}
	left := n
	ping := proc(func(events []sched.Event, out *sched.StepOutput) error {
		out.Status = sched.StatusWaitMessages
		if events == nil { // first step: wait for the go signal
			return nil
		}
		for i := range events {
			if events[i].Type == sched.EventCancel {
				out.Status = sched.StatusDone
				return nil
			}
			if events[i].Data == nil { // the go signal from the benchmark
				out.Send(pong, theBall)
				continue
			}
			left--
			if left == 0 {
				close(done)
				out.Status = sched.StatusDone
				return nil
			}
			out.Send(pong, theBall)
		}
		return nil
	})
	return measureDriven(s, "ping", ping, n, done)
}

// ChanPingPong is PingPong's baseline: two goroutines and two unbuffered
// channels, n round trips.
func ChanPingPong(n int) (Sample, error) {
	ping, pong := make(chan *ball), make(chan *ball)
	go func() {
		for b := range ping {
			pong <- b
		}
	}()
	defer close(ping)
	return measure(n, func() error {
		for i := 0; i < n; i++ {
			ping <- theBall
			<-pong
		}
		return nil
	})
}

// SpawnToDone spawns n trivial processes (one step, then done) from one
// goroutine and waits until the last has completed; one op = one process.
func SpawnToDone(workers, n int) (Sample, error) {
	var left atomic.Int64
	left.Store(int64(n))
	done := make(chan struct{})
	s, err := sched.New(sched.Config{Workers: workers, OnExit: func(sched.PID, error) {
		if left.Add(-1) == 0 {
			close(done)
		}
	}})
	if err != nil {
		return Sample{}, err
	}
	defer stop(s)
	trivial := proc(func(_ []sched.Event, out *sched.StepOutput) error {
		out.Status = sched.StatusDone
		return nil
	})
	return measure(n, func() error {
		for i := 0; i < n; i++ {
			if _, err := s.Spawn(trivial, "main", nil); err != nil {
				return err
			}
		}
		return waitOrTimeout(done)
	})
}

// GoSpawnToDone is SpawnToDone's baseline: n `go` statements and a
// WaitGroup.
func GoSpawnToDone(n int) (Sample, error) {
	var wg sync.WaitGroup
	return measure(n, func() error {
		wg.Add(n)
		for i := 0; i < n; i++ {
			go wg.Done()
		}
		wg.Wait()
		return nil
	})
}

// FanOut has one process send a message to each of width waiting processes,
// which each answer; a round ends when all answers are in. One op = one
// message delivered and answered; rounds*width ops in all.
func FanOut(workers, width, rounds int) (Sample, error) {
	s, err := sched.New(sched.Config{Workers: workers})
	if err != nil {
		return Sample{}, err
	}
	defer stop(s)
	pids := make([]sched.PID, width)
	for i := range pids {
		if pids[i], err = s.Spawn(echo, "echo", nil); err != nil {
			return Sample{}, err
		}
	}
	done := make(chan struct{})
	acks, round := 0, 0
	hub := proc(func(events []sched.Event, out *sched.StepOutput) error {
		out.Status = sched.StatusWaitMessages
		for i := range events {
			switch {
			case events[i].Type == sched.EventCancel:
				out.Status = sched.StatusDone
				return nil
			case events[i].Data == nil: // go signal
			default:
				if acks++; acks < width {
					continue
				}
				acks = 0
				if round++; round == rounds {
					close(done)
					out.Status = sched.StatusDone
					return nil
				}
			}
			for _, pid := range pids {
				out.Send(pid, theBall)
			}
		}
		return nil
	})
	return measureDriven(s, "hub", hub, width*rounds, done)
}

// ChanFanOut is FanOut's baseline: width goroutines, each with its own
// unbuffered inbox, answering on one shared channel.
func ChanFanOut(width, rounds int) (Sample, error) {
	inboxes := make([]chan *ball, width)
	acks := make(chan *ball, width)
	var wg sync.WaitGroup
	for i := range inboxes {
		inboxes[i] = make(chan *ball)
		wg.Add(1)
		go func(in chan *ball) {
			defer wg.Done()
			for b := range in {
				acks <- b
			}
		}(inboxes[i])
	}
	defer func() {
		for _, in := range inboxes {
			close(in)
		}
		wg.Wait()
	}()
	return measure(width*rounds, func() error {
		for r := 0; r < rounds; r++ {
			for _, in := range inboxes {
				in <- theBall
			}
			for i := 0; i < width; i++ {
				<-acks
			}
		}
		return nil
	})
}

type benchCmd struct{}

func (benchCmd) CommandType() sched.CommandType { return 1 }

// Yield has one process yield a command n times, one at a time, and wait
// for each completion. With async false the handler completes inside Handle
// (the scheduler's own cost); with async true a long-lived responder
// goroutine completes it (the shape of a real handler). One op = one yield
// answered.
func Yield(workers, n int, async bool) (Sample, error) {
	type yieldReq struct {
		c   sched.Completer
		tag uint64
	}
	reqs := make(chan yieldReq, 1024)
	var h sched.HandlerFunc = func(_ context.Context, _ sched.Command, tag uint64, c sched.Completer) error {
		c.CompleteYield(tag, theBall, nil)
		return nil
	}
	if async {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range reqs {
				r.c.CompleteYield(r.tag, theBall, nil)
			}
		}()
		defer wg.Wait()
		defer close(reqs)
		h = func(_ context.Context, _ sched.Command, tag uint64, c sched.Completer) error {
			reqs <- yieldReq{c, tag}
			return nil
		}
	}
	s, err := sched.New(sched.Config{Workers: workers, Handlers: map[sched.CommandType]sched.Handler{1: h}})
	if err != nil {
		return Sample{}, err
	}
	defer stop(s)
	done := make(chan struct{})
	var tag uint64
	yielder := proc(func(events []sched.Event, out *sched.StepOutput) error {
		out.Status = sched.StatusWaitMessages
		for i := range events {
			switch events[i].Type {
			case sched.EventCancel:
				out.Status = sched.StatusDone
				return nil
			case sched.EventYieldComplete:
				if int(tag) == n {
					close(done)
					out.Status = sched.StatusDone
					return nil
				}
			}
			tag++
			out.Yield(tag, benchCmd{})
			out.Status = sched.StatusWaitYields
		}
		return nil
	})
	return measureDriven(s, "yield", yielder, n, done)
}

// ChanRequest is Yield's baseline: a goroutine asks a server goroutine over
// a channel and waits for the answer on a reply channel, n times.
func ChanRequest(n int) (Sample, error) {
	type req struct{ reply chan *ball }
	reqs := make(chan req)
	go func() {
		for r := range reqs {
			r.reply <- theBall
		}
	}()
	defer close(reqs)
	reply := make(chan *ball)
	return measure(n, func() error {
		for i := 0; i < n; i++ {
			reqs <- req{reply}
			<-reply
		}
		return nil
	})
}

// Check that a workload's figures make sense before they are printed.
func (s Sample) String() string {
	return fmt.Sprintf("%d ops in %v (%.1f ns/op, %.2f allocs/op)", s.Ops, s.Elapsed, s.PerOp(), s.AllocsPerOp())
}
