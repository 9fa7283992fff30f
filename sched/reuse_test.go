package sched

import (
	"context"
	"errors"
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
