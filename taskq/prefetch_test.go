package taskq

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	ptestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gantryhq/gantry/internal/testutil"
)

// run records n handler runs of d each.
func (r *runTimes) run(n int, d time.Duration) {
	for range n {
		r.add(d)
	}
}

// TestPrefetcherFollowsRunTimes: short runs against the dequeue call put
// the extra slots in circulation (as many as twice a call's worth of
// tasks, at most ShortPrefetch); long runs retire them again as they come
// back, no more and no fewer; short runs mid-retirement cancel it first.
func TestPrefetcherFollowsRunTimes(t *testing.T) {
	var rt runTimes
	p := newPrefetcher(&rt, 4, 4) // base 8 slots

	rt.run(100, 50*time.Microsecond)
	p.observe(time.Millisecond) // 2 × 4 × 1ms/50µs = 160 wanted: 152 beyond the base, capped
	if add := p.adjust(); add != ShortPrefetch || p.circulating() != 8+ShortPrefetch {
		t.Fatalf("short runs: added %d (circulating %d), want %d (%d)", add, p.circulating(), ShortPrefetch, 8+ShortPrefetch)
	}
	if add := p.adjust(); add != 0 {
		t.Fatalf("again: added %d, want 0 (all out already)", add)
	}

	// Runs of 1 s: none wanted; the slots are retired as they come back.
	for range 20 {
		rt.run(1, time.Second)
		p.observe(time.Millisecond)
	}
	if add := p.adjust(); add != 0 || p.retire != ShortPrefetch {
		t.Fatalf("long runs: added %d, retiring %d; want 0 and %d", add, p.retire, ShortPrefetch)
	}
	kept := 0
	for range ShortPrefetch + 10 {
		if p.keep() {
			kept++
		}
	}
	if kept != 10 || p.circulating() != 8 || p.spare != ShortPrefetch {
		t.Fatalf("after long runs: kept %d of %d, circulating %d, spare %d; want 10, 8, %d",
			kept, ShortPrefetch+10, p.circulating(), p.spare, ShortPrefetch)
	}

	// Half-way through a retirement, short runs again: the retirement is
	// cancelled before any spare slot is added.
	p = newPrefetcher(&runTimes{}, 4, 4)
	p.runs.run(10, 50*time.Microsecond)
	p.observe(time.Millisecond)
	p.adjust()
	p.mean, p.call = time.Second, time.Millisecond
	p.adjust() // retire all 128
	for range 28 {
		p.keep() // 28 came back and were retired
	}
	p.mean = 50 * time.Microsecond
	if add := p.adjust(); add != 28 || p.retire != 0 || p.spare != 0 {
		t.Fatalf("short again mid-retirement: added %d, retiring %d, spare %d; want 28, 0, 0", add, p.retire, p.spare)
	}
}

// TestPrefetcherWantsNothingForSlowTasks: tasks that run longer than a
// call need no more than the configured buffer, however many handlers.
func TestPrefetcherWantsNothingForSlowTasks(t *testing.T) {
	var rt runTimes
	p := newPrefetcher(&rt, 64, 64)
	rt.run(64, 20*time.Millisecond)
	p.observe(2 * time.Millisecond) // 2 × 64 × 2ms/20ms = 12.8 < 128 = base
	if add := p.adjust(); add != 0 {
		t.Fatalf("added %d extra slots for 20 ms tasks, want 0", add)
	}
}

// TestShortTasksGetDeeperPrefetch: a worker of 2 handlers and a buffer of
// 2 drains 3,000 no-op tasks in batches far above its 4 slots (the extra
// slots circulate), while the same worker on 200 ms tasks never holds more
// than its 4 (leased: running + waiting), so slow tasks stay
// where an idle worker can take them. (Slow: far longer than a dequeue
// call. A 30 ms task against a 40 ms call under load rightly gets one
// extra slot.)
func TestShortTasksGetDeeperPrefetch(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	ctx := t.Context()
	enqueueN := func(q, typ string, n int) {
		batch := make([]*Task, n)
		for i := range batch {
			batch[i] = NewTask(typ, nil)
		}
		if _, err := c.EnqueueBatch(ctx, batch, Queue(q)); err != nil {
			t.Fatal(err)
		}
	}

	short := uniq(t, "short")
	enqueueN(short, "noop", 3000)
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: short}}, Concurrency: 2, Prefetch: 2, DisableSteal: true})
	var done atomic.Int64
	w.Handle("noop", func(context.Context, *Task) error { done.Add(1); return nil })
	stop := runWorker(t, w)
	waitFor(t, 30*time.Second, "3,000 no-op tasks", func() bool { return done.Load() == 3000 })
	stop()
	if calls := ptestutil.ToFloat64(w.m.dequeues); 3000/calls < 8 {
		t.Errorf("3,000 short tasks took %.0f dequeue calls (%.1f a call); want more than 8 a call: the extra slots did not circulate", calls, 3000/calls)
	}

	slow := uniq(t, "slow")
	enqueueN(slow, "nap", 12)
	w = newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: slow}}, Concurrency: 2, Prefetch: 2, DisableSteal: true})
	done.Store(0)
	w.Handle("nap", func(ctx context.Context, _ *Task) error {
		select {
		case <-time.After(200 * time.Millisecond): // real time: far longer than a dequeue call, even under -race on a busy machine
		case <-ctx.Done():
		}
		done.Add(1)
		return nil
	})
	runWorker(t, w)
	// Held: leased and not finished, 12 − pending − done. Not Redis's
	// active count: a finished task's ack is batched (ackLoop), so it stays
	// active a moment after its slot came back and the next was leased.
	// Pending is read before done, so a task finishing between the reads
	// can only make one sample low, never high.
	most := int64(0)
	deadline := time.Now().Add(30 * time.Second)
	for done.Load() < 12 {
		if time.Now().After(deadline) {
			t.Fatalf("12 tasks of 200 ms: %d done after 30 s", done.Load())
		}
		pending := queueStats(t, c, slow).Pending
		if held := 12 - pending - done.Load(); held > most {
			most = held
		}
	}
	if most > 4 {
		t.Errorf("200 ms tasks: up to %d held at once, want at most 4 (2 running + 2 waiting)", most)
	}
}

// TestBufferedTaskWithLostLeaseIsNotRun: a task that waited in the buffer
// behind a long one until its lease ran out and the reaper gave it back is
// not run from the buffer (it may be running elsewhere): it runs once,
// when dequeued again.
func TestBufferedTaskWithLostLeaseIsNotRun(t *testing.T) {
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	ctx := t.Context()
	q := "lapse"
	for _, typ := range []string{"long", "short"} {
		if _, err := c.Enqueue(ctx, NewTask(typ, nil), Queue(q)); err != nil {
			t.Fatal(err)
		}
	}
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 1, Prefetch: 1, DisableSteal: true,
		LeaseDuration: 600 * time.Millisecond, HeartbeatInterval: 150 * time.Millisecond, MaintainInterval: 50 * time.Millisecond})
	var shorts atomic.Int64
	w.Handle("long", func(ctx context.Context, _ *Task) error {
		select {
		case <-time.After(1500 * time.Millisecond): // real time: longer than the short task's lease
		case <-ctx.Done():
		}
		return nil
	})
	w.Handle("short", func(context.Context, *Task) error { shorts.Add(1); return nil })
	runWorker(t, w)
	waitFor(t, 20*time.Second, "both completed", func() bool { return queueStats(t, c, q).Completed == 2 })
	if n := shorts.Load(); n != 1 {
		t.Errorf("the short task ran %d times, want once", n)
	}
	if st := queueStats(t, c, q); st.ReapedTotal != 1 {
		t.Errorf("reaped %d, want 1: the short task's lease must have run out in the buffer for this test to say anything", st.ReapedTotal)
	}
}
