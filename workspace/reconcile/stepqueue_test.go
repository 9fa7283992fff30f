package reconcile

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStepQueueOrder: urgent steps are taken before bulk ones, each kind in
// the order it came; a worker of the urgent share never takes a bulk step;
// close stops the workers and hands back what is still queued.
func TestStepQueueOrder(t *testing.T) {
	q := newStepQueue()
	for i := range 5 {
		q.push(queuedStep{cmd: reconcileCmd{id: "b" + string(rune('0'+i))}})
	}
	q.push(queuedStep{cmd: reconcileCmd{id: "u0", urgent: true}})
	q.push(queuedStep{cmd: reconcileCmd{id: "u1", urgent: true}})
	var got []string
	for range 4 {
		s, ok := q.pop(false)
		if !ok {
			t.Fatal("pop on an open queue with steps: false")
		}
		got = append(got, s.cmd.id)
	}
	if want := "u0 u1 b0 b1"; join(got) != want {
		t.Fatalf("popped %s, want %s", join(got), want)
	}

	// A worker of the urgent share waits while only bulk steps are queued,
	// and takes the next urgent one.
	took := make(chan string, 1)
	go func() {
		s, ok := q.pop(true)
		if ok {
			took <- s.cmd.id
		}
		close(took)
	}()
	select {
	case id := <-took:
		t.Fatalf("urgent-only worker took %q with only bulk steps queued", id)
	case <-time.After(50 * time.Millisecond):
	}
	q.push(queuedStep{cmd: reconcileCmd{id: "u2", urgent: true}})
	if id := <-took; id != "u2" {
		t.Fatalf("urgent-only worker took %q, want u2", id)
	}

	left := q.close()
	var ids []string
	for _, s := range left {
		ids = append(ids, s.cmd.id)
	}
	if want := "b2 b3 b4"; join(ids) != want {
		t.Fatalf("close handed back %s, want %s", join(ids), want)
	}
	if q.push(queuedStep{}) {
		t.Fatal("push after close: true")
	}
	if _, ok := q.pop(false); ok {
		t.Fatal("pop after close: true")
	}
}

// TestStepQueueWorkers: a lone step runs at once whichever workers sleep
// (no lost wake-up: a signal that woke only a worker of the urgent share
// for a bulk step left it queued while the others slept); under a burst n
// workers run every step, never more than n at once.
func TestStepQueueWorkers(t *testing.T) {
	const n, burst = 8, 20000
	q := newStepQueue()
	var mu sync.Mutex
	running, peak := 0, 0
	ran := make(chan struct{}, burst)
	var wg sync.WaitGroup
	q.run(n, &wg, func(queuedStep) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		runtime.Gosched() // overlap the workers
		mu.Lock()
		running--
		mu.Unlock()
		ran <- struct{}{}
	})
	for i := range 3 * n {
		q.push(queuedStep{cmd: reconcileCmd{urgent: i%5 == 4}})
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatalf("lone step %d still queued after 5 s with %d idle workers", i, n)
		}
	}
	for i := range burst {
		q.push(queuedStep{cmd: reconcileCmd{urgent: i%7 == 0}})
	}
	for i := range burst {
		select {
		case <-ran:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d steps of the burst ran in 30 s", i, burst)
		}
	}
	if left := q.close(); len(left) != 0 {
		t.Fatalf("%d steps left after all ran", len(left))
	}
	wg.Wait()
	if peak > n {
		t.Fatalf("%d steps ran at once on %d workers", peak, n)
	}
}

func join(ss []string) string { return strings.Join(ss, " ") }

// TestStepQueuePromote: a bulk step promoted (its workspace's user change
// came while it waited) runs next, as urgent work; its place in the bulk
// queue is skipped, and close hands back the others only. A workspace with
// no bulk step waiting promotes nothing.
func TestStepQueuePromote(t *testing.T) {
	q := newStepQueue()
	for _, id := range []string{"b0", "b1", "b2"} {
		q.push(queuedStep{cmd: reconcileCmd{id: id}})
	}
	if q.promote("nope") {
		t.Fatal("promoted a workspace with no step waiting")
	}
	if !q.promote("b1") || q.promote("b1") {
		t.Fatal("b1 promoted: want true once, then false")
	}
	s, ok := q.pop(true) // a worker of the urgent share takes it
	if !ok || s.cmd.id != "b1" || !s.cmd.urgent {
		t.Fatalf("urgent-only pop = %+v, %v; want b1, urgent", s.cmd, ok)
	}
	var got []string
	for range 2 {
		s, _ := q.pop(false)
		got = append(got, s.cmd.id)
	}
	if want := "b0 b2"; join(got) != want {
		t.Fatalf("bulk pops %s, want %s (the promoted step's place skipped)", join(got), want)
	}
	q.push(queuedStep{cmd: reconcileCmd{id: "b3"}})
	q.push(queuedStep{cmd: reconcileCmd{id: "b4"}})
	q.promote("b3")
	var left []string
	for _, s := range q.close() {
		left = append(left, s.cmd.id)
	}
	if want := "b3 b4"; join(left) != want {
		t.Fatalf("close handed back %s, want %s (b3 once, from the urgent queue)", join(left), want)
	}
}
