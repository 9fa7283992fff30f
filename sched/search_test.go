package sched

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// These tests drive one worker's search by hand on a scheduler whose workers
// were never started, so the order of sources is observed exactly.

func readyProcs(s *Scheduler, n int) []*proc {
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = &proc{pid: PID(i + 1), s: s}
		ps[i].state.Store(uint64(StateReady))
	}
	return ps
}

func idle(t *testing.T, workers int) *Scheduler {
	t.Helper()
	s, err := newScheduler(Config{Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSearchOrder: runnext, then the local deque, then the global queue,
// then stealing from another worker, then nothing.
func TestSearchOrder(t *testing.T) {
	s := idle(t, 2)
	w0, w1 := s.workers[0], s.workers[1]
	ps := readyProcs(s, 4)
	next, local, global, victim := ps[0], ps[1], ps[2], ps[3]
	w0.runnext = next
	w0.dq.Push(local)
	s.global.push(global)
	w1.dq.Push(victim)
	w0.tick = 1 // away from the fairness ticks (0 and 30 mod 61)
	var got []PID
	for p := w0.tryFind(); p != nil; p = w0.tryFind() {
		got = append(got, p.pid)
	}
	want := []PID{next.pid, local.pid, global.pid, victim.pid}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("search order (-want +got):\n%s", diff)
	}
}

// TestFairnessTicks: every 61st search reads the global queue before local
// work, and spills runnext to the deque where a thief can reach it.
func TestFairnessTicks(t *testing.T) {
	s := idle(t, 2)
	w := s.workers[0]
	ps := readyProcs(s, 3)
	w.runnext = ps[0]
	w.dq.Push(ps[1])
	s.global.push(ps[2])
	w.tick = globalCheckTicks - 1
	if p := w.tryFind(); p != ps[2] {
		t.Fatalf("tick 61 took %v, want the global process", p.pid)
	}
	if w.runnext != nil || w.dq.Len() != 2 {
		t.Fatalf("runnext %v, deque %d; want runnext spilled to the deque", w.runnext, w.dq.Len())
	}
	if p := s.workers[1].steal(); p != ps[1] {
		t.Fatalf("thief took %v, want the oldest local process", p)
	}
}

// TestGlobalTransferIsOnePlusBatch: a worker taking from the global queue
// runs the oldest and moves the next 16, in order, to its deque.
func TestGlobalTransferIsOnePlusBatch(t *testing.T) {
	s := idle(t, 1)
	w := s.workers[0]
	ps := readyProcs(s, 40)
	for _, p := range ps {
		s.global.push(p)
	}
	w.tick = 1
	if p := w.tryFind(); p != ps[0] {
		t.Fatalf("took %v, want the oldest", p.pid)
	}
	if w.dq.Len() != globalBatch || s.global.len() != 40-1-globalBatch {
		t.Fatalf("deque %d, global %d; want %d and %d", w.dq.Len(), s.global.len(), globalBatch, 40-1-globalBatch)
	}
	var got []PID
	for p := w.dq.Steal(); p != nil; p = w.dq.Steal() { // oldest first
		got = append(got, p.pid)
	}
	var want []PID
	for _, p := range ps[1 : 1+globalBatch] {
		want = append(want, p.pid)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("batch (-want +got):\n%s", diff)
	}
	if globalBatch != 16 {
		t.Fatalf("globalBatch = %d, the seed says 16", globalBatch)
	}
}

// TestSpinThresholds: a worker with nothing to do retries tightly for spins
// 1–3, yields the thread for spins 4–15, and parks at 16.
func TestSpinThresholds(t *testing.T) {
	type spin struct {
		n     int
		yield bool
	}
	var mu sync.Mutex
	var spins []spin
	parked := make(chan struct{})
	var once sync.Once
	hooks := &testHooks{
		spin: func(n int, yield bool) {
			mu.Lock()
			spins = append(spins, spin{n, yield})
			mu.Unlock()
		},
		beforePark: func() { once.Do(func() { close(parked) }) },
	}
	start(t, Config{Workers: 1, hooks: hooks})
	recv(t, parked, 10*time.Second, "the first park")
	mu.Lock()
	got := append([]spin(nil), spins[:min(len(spins), spinYield)]...)
	mu.Unlock()
	var want []spin
	for n := 1; n <= 16; n++ {
		want = append(want, spin{n, n >= 4 && n < 16})
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(spin{})); diff != "" {
		t.Fatalf("spins before the first park (-want +got):\n%s", diff)
	}
}

// TestDefaultWorkersIsGOMAXPROCS reads GOMAXPROCS at New, not NumCPU.
func TestDefaultWorkersIsGOMAXPROCS(t *testing.T) {
	for _, procs := range []int{1, 3} {
		old := runtime.GOMAXPROCS(procs)
		s, err := newScheduler(Config{})
		runtime.GOMAXPROCS(old)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.workers) != procs || s.Stats().Workers != procs {
			t.Fatalf("GOMAXPROCS %d: %d workers", procs, len(s.workers))
		}
	}
}
