package sched

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// These tests open each race window of the README's publish-then-check
// pairs with a hook and put the other side's action exactly there.

// TestEventBetweenLoadAndWaitCAS is the original runtime's lost wake-up
// (Wippy PR #325): the worker loads Running with an empty inbox, a producer
// queues an event, the worker's CAS to Idle fails. A single CAS gave up there
// and the process slept forever with a message queued; ours retries, sees the
// event, and runs the process again.
func TestEventBetweenLoadAndWaitCAS(t *testing.T) {
	var fired atomic.Bool
	got := make(chan any, 1)
	hooks := &testHooks{beforeWaitCAS: func(p *proc) {
		if fired.CompareAndSwap(false, true) {
			// A producer's whole delivery, inside the window.
			if !p.deliver(wordGen(p.state.Load()), Event{Type: EventMessage, Data: "in the window"}, nil) {
				t.Error("deliver to a running process failed")
			}
			if st := p.state.Load(); wordState(st) != StateRunning || wordTop(st) == 0 {
				t.Errorf("delivery to a Running process: state %v, inbox top %d; want running with the event queued", wordState(st), wordTop(st))
			}
		}
	}}
	s := start(t, Config{Workers: 1, hooks: hooks})
	mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
		out.Status = StatusWaitMessages
		for _, ev := range events {
			switch ev.Type {
			case EventMessage:
				got <- ev.Data
			case EventCancel:
				out.Status = StatusDone
			}
		}
		return nil
	}})
	select {
	case v := <-got:
		if v != "in the window" {
			t.Fatalf("got %v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("message delivered between load and CAS was never stepped: lost wake-up")
	}
}

// TestWorkQueuedWhileWorkerDecidesToPark: "A finds no work; B posts work but
// sees no sleepers; A sleeps". The hook runs after the worker's last failed
// search and before it registers as parked; there a producer queues a
// process and calls wakeOne, which finds nparked == 0 and wakes nobody. The
// worker's re-check after registering must find the process.
//
// The "spinner" case is pair 3: the hook runs while the worker still counts
// as spinning, so the producer's wakeOne sees nspin > 0 and wakes nobody;
// the worker then leaves the spinning count and parks, and the same re-check
// must find the process.
func TestWorkQueuedWhileWorkerDecidesToPark(t *testing.T) {
	for _, window := range []string{"parking", "spinner"} {
		t.Run(window, func(t *testing.T) { workQueuedWhileParking(t, window == "spinner") })
	}
}

func workQueuedWhileParking(t *testing.T, spinner bool) {
	var s *Scheduler
	var pr atomic.Pointer[proc]
	var fired atomic.Bool
	post := func() {
		p := pr.Load()
		if p == nil || !fired.CompareAndSwap(false, true) {
			return
		}
		if s.nparked.Load() != 0 {
			t.Error("nparked != 0 inside the window")
		}
		if spinner && s.nspin.Load() == 0 {
			t.Error("nspin == 0 inside the spinner window")
		}
		p.deliver(wordGen(p.state.Load()), Event{Type: EventMessage, Data: "posted while parking"}, nil)
	}
	hooks := &testHooks{beforePark: post}
	if spinner {
		hooks = &testHooks{beforeStopSpin: post}
	}
	ran := make(chan any, 1)
	s = start(t, Config{Workers: 1, hooks: hooks})
	pid := mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
		out.Status = StatusWaitMessages
		for _, ev := range events {
			switch ev.Type {
			case EventMessage:
				ran <- ev.Data
			case EventCancel:
				out.Status = StatusDone
			}
		}
		return nil
	}})
	// Arm the hook once the process is Idle, so its next park is the one.
	deadline := time.Now().Add(10 * time.Second)
	for s.procs.get(pid).loadState() != StateIdle {
		if time.Now().After(deadline) {
			t.Fatal("process never went idle")
		}
		runtime.Gosched()
	}
	pr.Store(s.procs.get(pid))
	// Make the worker search and park again: a no-op process.
	mustSpawn(t, s, &fnProc{step: func(_ []Event, out *StepOutput) error { out.Status = StatusDone; return nil }})
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatalf("work queued before the park re-check was never run: lost wake-up (fired=%v)", fired.Load())
	}
}
