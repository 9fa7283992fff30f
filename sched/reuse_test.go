package sched

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStaleReferencesToAReusedRecordAreHarmless: process A yields, and its
// handler keeps the Completer and the context; A finishes; process B is
// spawned on the same worker and gets A's record (same index, next
// generation; asserted, so the test really covers reuse). Everything that
// still names A must miss B: A's late completion is dropped and counted,
// A's context stays cancelled with A's PID, Send and Cancel to A's PID
// fail, and B's context is not cancelled by any of it.
func TestStaleReferencesToAReusedRecordAreHarmless(t *testing.T) {
	type kept struct {
		ctx context.Context
		c   Completer
		tag uint64
	}
	handled := make(chan kept, 1)
	ex := newExits(4)
	s := start(t, Config{Workers: 1, OnExit: ex.onExit, Handlers: map[CommandType]Handler{
		7: HandlerFunc(func(ctx context.Context, _ Command, tag uint64, c Completer) error {
			handled <- kept{ctx, c, tag} // never completed in time
			return nil
		}),
	}})
	// A: yields once, then finishes on its first message.
	a := mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
		if events == nil {
			out.Yield(1, cmd7{})
			out.Status = StatusWaitYields
			return nil
		}
		out.Status = StatusDone
		return nil
	}})
	k := <-handled
	// A lookup made while A is live: the window between get and deliver
	// in which A finishes and B takes the record.
	recA := s.procs.get(a)
	if recA == nil {
		t.Fatal("A not found while live")
	}
	if err := s.Send(a, "finish"); err != nil {
		t.Fatal(err)
	}
	ex.wait(t, 1, 10*time.Second)

	// B, spawned from a step on the same (only) worker, takes the record
	// A's completion freed there.
	gotB := make(chan PID, 1)
	bEvents := make(chan Event, 16)
	var bctx context.Context
	spawner := mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
		out.Status = StatusWaitMessages
		for _, ev := range events {
			if ev.Type == EventCancel {
				out.Status = StatusDone
				return nil
			}
			pid, err := out.Spawn(&fnProc{
				init: func(ctx context.Context, _ string, _ []any) error { bctx = ctx; return nil },
				step: func(events []Event, out *StepOutput) error {
					for _, ev := range events {
						bEvents <- ev
						if ev.Type == EventCancel {
							out.Status = StatusDone
							return nil
						}
					}
					out.Status = StatusWaitMessages
					return nil
				},
			}, "b", nil)
			if err != nil {
				return err
			}
			gotB <- pid
		}
		return nil
	}})
	if err := s.Send(spawner, "spawn"); err != nil {
		t.Fatal(err)
	}
	var b PID
	select {
	case b = <-gotB:
	case <-time.After(10 * time.Second):
		t.Fatal("B was not spawned")
	}
	if uint32(b) != uint32(a) || b == a {
		t.Fatalf("B = %v, A = %v: want A's record (same index) with the next generation", b, a)
	}

	dropped := s.Stats().DroppedCompletions
	k.c.CompleteYield(k.tag, "late", nil)
	if got := s.Stats().DroppedCompletions; got != dropped+1 {
		t.Errorf("A's late completion: DroppedCompletions %d → %d, want +1", dropped, got)
	}
	if !errors.Is(k.ctx.Err(), context.Canceled) {
		t.Errorf("A's context after A finished: Err = %v, want Canceled", k.ctx.Err())
	}
	select {
	case <-k.ctx.Done():
	default:
		t.Error("A's context is not Done after A finished")
	}
	if Self(k.ctx) != a {
		t.Errorf("Self(A's context) = %v, want %v", Self(k.ctx), a)
	}
	if recA.deliver(uint32(a>>32), Event{Type: EventMessage, Data: "stale"}, nil) {
		t.Error("a delivery for A through a lookup made before A finished was accepted by B's record")
	}
	if err := s.Send(a, "stale"); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Send to A's PID: %v, want ErrNoProcess", err)
	}
	if err := s.Cancel(a); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Cancel of A's PID: %v, want ErrNoProcess", err)
	}
	if bctx.Err() != nil || Self(bctx) != b {
		t.Errorf("B's context: Err %v, Self %v; want nil, %v", bctx.Err(), Self(bctx), b)
	}
	// B saw nothing meant for A: its next event is the one sent to it.
	if err := s.Send(b, "for B"); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-bEvents:
		if ev.Type != EventMessage || ev.Data != "for B" {
			t.Fatalf("B's first event: %+v, want the message for B", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B never got its message")
	}
}

type cmd7 struct{}

func (cmd7) CommandType() CommandType { return 7 }

// TestMessagesNeverReachALaterProcessOnTheSameRecord: short-lived processes
// are spawned from steps (so records are reused at once) while outside
// goroutines keep sending to PIDs of processes that have already finished
// or are about to. Each message carries the PID it was sent to, and every
// process checks it got only its own: a delivery that slipped past the
// generation checks (get's, then deliver's CAS) would reach a later process
// on the same record. A stress test for -race; the deterministic window is
// in TestStaleReferencesToAReusedRecordAreHarmless.
func TestMessagesNeverReachALaterProcessOnTheSameRecord(t *testing.T) {
	const total = 5000
	s := start(t, Config{Workers: 2})
	pids := make(chan PID, 1024)
	spawned := make(chan struct{})
	var misrouted atomicCount
	mkChild := func() Process {
		return &fnProc{step: func(events []Event, out *StepOutput) error {
			for _, ev := range events {
				if ev.Type == EventMessage && ev.Data.(PID) != out.Self() {
					misrouted.add()
				}
			}
			out.Status = StatusDone // one or two steps, then the record is free
			if events == nil {
				out.Status = StatusContinue
			}
			return nil
		}}
	}
	n := 0
	mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
		for range 64 {
			pid, err := out.Spawn(mkChild(), "child", nil)
			if err != nil {
				return err
			}
			select {
			case pids <- pid:
			default:
			}
			if n++; n == total {
				close(spawned)
				out.Status = StatusDone
				return nil
			}
		}
		out.Status = StatusContinue
		return nil
	}})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var recent []PID
			for {
				select {
				case <-stop:
					return
				case pid := <-pids:
					recent = append(recent, pid)
					if len(recent) > 32 {
						recent = recent[1:]
					}
				}
				for _, pid := range recent {
					_ = s.Send(pid, pid) // ErrNoProcess is expected for most
				}
			}
		}()
	}
	select {
	case <-spawned:
	case <-time.After(30 * time.Second):
		t.Fatal("spawner did not finish")
	}
	close(stop)
	wg.Wait()
	if m := misrouted.load(); m != 0 {
		t.Fatalf("%d messages reached a process they were not sent to", m)
	}
}

type atomicCount struct{ n atomic.Int64 }

func (c *atomicCount) add()        { c.n.Add(1) }
func (c *atomicCount) load() int64 { return c.n.Load() }
