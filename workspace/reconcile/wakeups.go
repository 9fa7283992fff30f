package reconcile

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
)

// wakeups pokes workspaces at given times (a retry's backoff, a dead
// owner's lease lapsing, an operation's deadline) from one goroutine and
// one clock timer, rather than a runtime timer per workspace: 10,000
// workspaces waiting for their operations' deadlines cost 10,000 heap
// entries, and tests can drive it with a clock.Fake.
type wakeups struct {
	clk  clock.Clock
	kick chan struct{} // buffered 1: "the earliest due time may have moved"

	// mu protects due and queue.
	// Invariant: due[id] is id's one pending wake-up, the earliest asked
	// for; queue may also hold superseded entries of id, skipped when popped.
	mu    sync.Mutex
	due   map[string]time.Time
	queue wakeQueue

	// beforeTimer, if set (tests), runs between the loop's reading of the
	// clock and the making of its timer.
	beforeTimer func()
}

func newWakeups(clk clock.Clock) *wakeups {
	return &wakeups{clk: clk, kick: make(chan struct{}, 1), due: map[string]time.Time{}}
}

// at asks for id to be poked d from now, unless an earlier poke is pending.
// The poke comes 1 ms late so that times stored in milliseconds have
// passed by then. Any goroutine.
func (w *wakeups) at(id string, d time.Duration) {
	when := w.clk.Now().Add(max(d, 0) + time.Millisecond)
	w.mu.Lock()
	if cur, ok := w.due[id]; ok && !cur.After(when) {
		w.mu.Unlock()
		return
	}
	w.due[id] = when
	heap.Push(&w.queue, wake{when: when, id: id})
	first := w.queue[0].id == id && w.queue[0].when.Equal(when)
	w.mu.Unlock()
	if first {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// pending reports how many workspaces wait for a poke. Any goroutine.
func (w *wakeups) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.due)
}

// run calls poke for each wake-up as it comes due, until ctx ends. One
// goroutine (Run's wake-up loop).
func (w *wakeups) run(ctx context.Context, poke func(id string)) {
	for {
		ready, next := w.popDue()
		for _, id := range ready {
			poke(id)
		}
		if len(ready) > 0 {
			continue
		}
		wait := time.Hour // idle: at() kicks the loop when work arrives
		if !next.IsZero() {
			wait = next.Sub(w.clk.Now())
		}
		if w.beforeTimer != nil {
			w.beforeTimer()
		}
		t := w.clk.NewTimer(wait)
		if !next.IsZero() && !w.clk.Now().Before(next) {
			// The clock passed next while the timer was made (a test's
			// fake clock, advanced meanwhile, would never fire it).
			t.Stop()
			continue
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-w.kick:
			t.Stop()
		}
	}
}

// popDue removes and returns the ids due now, or when the next is due
// (zero: none pending).
func (w *wakeups) popDue() (ready []string, next time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clk.Now()
	for len(w.queue) > 0 {
		top := w.queue[0]
		if cur, ok := w.due[top.id]; !ok || !cur.Equal(top.when) {
			heap.Pop(&w.queue) // superseded by an earlier wake-up of the same id
			continue
		}
		if top.when.After(now) {
			return ready, top.when
		}
		heap.Pop(&w.queue)
		delete(w.due, top.id)
		ready = append(ready, top.id)
	}
	return ready, time.Time{}
}

type wake struct {
	when time.Time
	id   string
}

// wakeQueue is a min-heap of wake-ups by time (container/heap).
type wakeQueue []wake

func (q wakeQueue) Len() int           { return len(q) }
func (q wakeQueue) Less(i, j int) bool { return q[i].when.Before(q[j].when) }
func (q wakeQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *wakeQueue) Push(x any)        { *q = append(*q, x.(wake)) }
func (q *wakeQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
