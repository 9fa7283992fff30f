package sched

import (
	"sync"
	"testing"
	"time"
)

// TestInboxKeepsOrderAcrossArenaGrowthAndCaches: more events than a worker's
// node cache and an arena segment hold are queued to one waiting process,
// from a step (worker caches) and from outside goroutines (the arena's free
// list); every event arrives once, and each sender's events in order.
func TestInboxKeepsOrderAcrossArenaGrowthAndCaches(t *testing.T) {
	const perSender = 3 * nodeSegSize / 2 // > a segment and > nodeCacheMax
	const outside = 3
	s := start(t, Config{Workers: 2})
	got := make(map[PID][]int)
	next := make(map[int]int) // outside sender → next expected
	done := make(chan struct{})
	total := 0
	sink := mustSpawn(t, s, &fnProc{step: func(events []Event, out *StepOutput) error {
		out.Status = StatusWaitMessages
		for _, ev := range events {
			switch ev.Type {
			case EventCancel:
				out.Status = StatusDone
				return nil
			case EventMessage:
				if ev.From != 0 {
					got[ev.From] = append(got[ev.From], ev.Data.(int))
				} else {
					m := ev.Data.([2]int)
					if m[1] != next[m[0]] {
						t.Errorf("outside sender %d: got %d, want %d", m[0], m[1], next[m[0]])
					}
					next[m[0]]++
				}
				if total++; total == 2*perSender+outside*perSender {
					close(done)
				}
			}
		}
		return nil
	}})
	var senders []PID
	for range 2 {
		senders = append(senders, mustSpawn(t, s, &fnProc{step: func(_ []Event, out *StepOutput) error {
			for i := range perSender {
				out.Send(sink, i)
			}
			out.Status = StatusDone
			return nil
		}}))
	}
	var wg sync.WaitGroup
	for g := range outside {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				if err := s.Send(sink, [2]int{g, i}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("sink got %d of %d events", total, 2*perSender+outside*perSender)
	}
	for _, pid := range senders {
		seq := got[pid]
		if len(seq) != perSender {
			t.Fatalf("sender %v: %d events, want %d", pid, len(seq), perSender)
		}
		for i, v := range seq {
			if v != i {
				t.Fatalf("sender %v: event %d is %d", pid, i, v)
			}
		}
	}
}

// TestInboxWordLayout: state and inbox top share the word without
// disturbing each other.
func TestInboxWordLayout(t *testing.T) {
	w := withTop(withState(0, StateIdle), 1<<topBits-1)
	if wordState(w) != StateIdle || wordTop(w) != 1<<topBits-1 {
		t.Fatalf("state %v top %d", wordState(w), wordTop(w))
	}
	w = withState(w, StateComplete)
	w = withTop(w, 7)
	if wordState(w) != StateComplete || wordTop(w) != 7 {
		t.Fatalf("state %v top %d", wordState(w), wordTop(w))
	}
}
