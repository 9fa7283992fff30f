package taskq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

// Every component stops safely twice and before start, and a start after
// stop runs nothing.
func TestComponentStopTwiceAndBeforeStart(t *testing.T) {
	var runs atomic.Int32
	body := func(ctx context.Context) { runs.Add(1); <-ctx.Done() }

	var never loop
	never.stop()
	never.stop()
	never.launch(t.Context(), body)
	if runs.Load() != 0 {
		t.Fatal("a loop started after stop ran")
	}

	var l loop
	l.launch(t.Context(), body)
	l.launch(t.Context(), body) // second start: ignored
	testutil.WaitFor(t, 5*time.Second, "the loop to run", func() (bool, string) {
		return runs.Load() == 1, fmt.Sprint(runs.Load(), " runs")
	})
	l.stop()
	l.stop()
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}

	// The worker's components, never started, stop at once.
	w, err := NewWorker(WorkerConfig{Redis: testRedis(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.r.Close()
	w.stopComponents()
	w.stopComponents()
}

func fakeClock() *clock.Fake { return clock.NewFake(time.Now().Truncate(time.Millisecond)) }

// leaseOf reads the lease expiry of task id in q.
func leaseOf(t *testing.T, r *rdb.RDB, q, id string) (time.Time, bool) {
	t.Helper()
	c := r.Client()
	ms, err := c.Do(t.Context(), c.B().Zscore().Key(rdb.QueueKeys(q)[rdb.KLease]).Member(id).Build()).AsFloat64()
	if rdb.IsNil(err) {
		return time.Time{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(int64(ms)), true
}

// The lease keeper beats on its clock: one Advance of the interval extends
// a held lease to now+lease and cancels a task whose lease is gone or was
// given to a later dequeue (its end is not the one this worker set).
func TestLeaseKeeperBeatsOnTheClock(t *testing.T) {
	addr := testRedis(t)
	c, r, q := newClient(t, addr), openRDB(t, addr), uniq(t, "q")
	enqueueTenant(t, c, q, "x", 0, 2)
	clk := fakeClock()
	t0 := clk.Now()
	deq, err := r.Dequeue(t.Context(), []string{q}, 2, t0, t0.Add(time.Minute))
	ds := deq.Tasks
	if err != nil || len(ds) != 2 {
		t.Fatalf("dequeue: %v %v", ds, err)
	}
	set := newInflightSet()
	var cancelled [3]atomic.Bool
	task := func(i int, held time.Time) *inflightTask {
		return &inflightTask{cancel: func() { cancelled[i].Store(true) }, held: held.UnixMilli()}
	}
	// held: its last extend went unanswered but did apply (its end is
	// among the maybe ends)
	held := task(0, t0.Add(time.Minute-time.Second))
	held.maybe = []int64{t0.Add(time.Minute).UnixMilli()}
	// leased again: the reaper gave it back and a dequeue leased it anew
	// (its end is no longer the one this worker holds)
	stale := task(1, t0.Add(time.Minute-time.Millisecond))
	gone := task(2, t0.Add(time.Minute))
	set.add(inflightKey{q, ds[0].ID}, held)
	set.add(inflightKey{q, ds[1].ID}, stale)
	set.add(inflightKey{q, "reaped-elsewhere"}, gone)

	k := newLeaseKeeper(leaseKeeperParams{r: r, inflight: set, lease: time.Minute, interval: 10 * time.Second, clock: clk})
	k.start(t.Context())
	defer k.stop()
	clk.BlockUntil(1) // the ticker is armed
	if until, _ := leaseOf(t, r, q, ds[0].ID); !until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("lease before a beat %v, want %v", until, t0.Add(time.Minute))
	}
	clk.Advance(10 * time.Second)
	want := t0.Add(10*time.Second + time.Minute)
	testutil.WaitFor(t, 5*time.Second, "the beat", func() (bool, string) {
		until, _ := leaseOf(t, r, q, ds[0].ID)
		return until.Equal(want) && gone.lost.Load(), fmt.Sprintf("lease until %v (want %v), lost %v", until, want, gone.lost.Load())
	})
	if !cancelled[2].Load() || cancelled[0].Load() || held.lost.Load() {
		t.Errorf("gone task cancelled %v; held task cancelled %v, marked lost %v", cancelled[2].Load(), cancelled[0].Load(), held.lost.Load())
	}
	if !stale.lost.Load() || !cancelled[1].Load() {
		t.Errorf("a task leased again since: lost %v, cancelled %v; want both", stale.lost.Load(), cancelled[1].Load())
	}
	if until, _ := leaseOf(t, r, q, ds[1].ID); !until.Equal(t0.Add(time.Minute)) {
		t.Errorf("the later dequeue's lease was moved to %v, want it left at %v", until, t0.Add(time.Minute))
	}
	set.mu.Lock()
	if held.held != want.UnixMilli() || len(held.maybe) != 0 {
		t.Errorf("held lease end after the beat %d (maybe %v), want %d and none", held.held, held.maybe, want.UnixMilli())
	}
	set.mu.Unlock()
}

// A second run of the same task (a later dequeue leased it again while the
// first ran on) stops the first; the first's end removes only itself; an
// unanswered extend adds a maybe end, an answered one settles it.
func TestInflightSetKeepsRunsApart(t *testing.T) {
	set := newInflightSet()
	k := inflightKey{"q", "x"}
	var firstCancelled atomic.Bool
	first := &inflightTask{cancel: func() { firstCancelled.Store(true) }, held: 1000}
	second := &inflightTask{cancel: func() {}, held: 2000}
	set.add(k, first)
	set.add(k, second)
	if !first.lost.Load() || !firstCancelled.Load() || second.lost.Load() {
		t.Fatalf("after a second run: first lost %v cancelled %v, second lost %v; want true, true, false",
			first.lost.Load(), firstCancelled.Load(), second.lost.Load())
	}
	set.remove(k, first)
	runs := set.byQueue()["q"]
	if len(runs) != 1 || runs[0].t != second || runs[0].lease.Held != 2000 {
		t.Fatalf("after the first run ended: %+v, want the second run with end 2000", runs)
	}
	set.extended(runs, time.UnixMilli(3000), false)
	set.extended(runs, time.UnixMilli(4000), false)
	if r := set.byQueue()["q"][0].lease; r.Held != 2000 || fmt.Sprint(r.Maybe) != "[3000 4000]" {
		t.Fatalf("after two unanswered extends: %+v, want held 2000, maybe [3000 4000]", r)
	}
	set.extended(runs, time.UnixMilli(5000), true)
	if r := set.byQueue()["q"][0].lease; r.Held != 5000 || len(r.Maybe) != 0 || second.lease.Load() != 5000 {
		t.Fatalf("after an answered extend: %+v (lease %d), want held 5000, no maybe", r, second.lease.Load())
	}
	set.remove(k, second)
	if set.len() != 0 {
		t.Fatal("the second run's end left it in the set")
	}
}

// The maintainer reaps on its clock: a lease that expires in fake time is
// taken back after the Advance that passes it, not before.
func TestMaintainerReapsOnTheClock(t *testing.T) {
	addr := testRedis(t)
	c, r, q := newClient(t, addr), openRDB(t, addr), uniq(t, "q")
	enqueueTenant(t, c, q, "x", 0, 2)
	clk := fakeClock()
	t0 := clk.Now()
	if deq, err := r.Dequeue(t.Context(), []string{q}, 2, t0, t0.Add(3*time.Second)); err != nil || len(deq.Tasks) != 2 {
		t.Fatalf("dequeue: %v %v", deq.Tasks, err)
	}
	var records atomic.Int32
	m := newMaintainer(maintainerParams{r: r, queues: []string{q}, interval: 2 * time.Second,
		deadRetention: time.Hour, deadMax: 10, clock: clk, m: newMetrics(nil), log: slog.New(slog.DiscardHandler),
		writeRecord: func(context.Context) { records.Add(1) }})
	m.start(t.Context())
	defer m.stop()
	clk.BlockUntil(1)
	clk.Advance(2 * time.Second) // tick 0: record and gauges, maintain at t0+2s: nothing expired
	testutil.WaitFor(t, 5*time.Second, "the first tick", func() (bool, string) {
		return records.Load() == 1, fmt.Sprint(records.Load(), " records")
	})
	if st := queueStats(t, c, q); st.Active != 2 || st.ReapedTotal != 0 {
		t.Fatalf("before the lease expired: active %d reaped %d, want 2 and 0", st.Active, st.ReapedTotal)
	}
	clk.Advance(2 * time.Second) // t0+4s: both leases expired
	testutil.WaitFor(t, 5*time.Second, "the reap", func() (bool, string) {
		st := queueStats(t, c, q)
		return st.Pending == 2 && st.ReapedTotal == 2, fmt.Sprintf("pending %d reaped %d", st.Pending, st.ReapedTotal)
	})
}

// While Redis is down the worker backs off on its clock: without an
// Advance it makes no call at all (no busy loop), each Advance past the
// backoff gives the fetcher one more try, and after Redis is back the
// worker resumes by itself.
func TestOutageBacksOffOnTheClock(t *testing.T) {
	red := testutil.StartRedis(t)
	c := newClient(t, red.Addr())
	clk := fakeClock()
	maxBackoff := time.Second
	w := newTestWorker(t, red.Addr(), WorkerConfig{Queues: []QueueSpec{{Name: "o"}}, Clock: clk,
		RedisBackoff: backoff.Policy{Initial: 100 * time.Millisecond, Max: maxBackoff}, MaintainInterval: time.Hour,
		IdleWait:       100 * time.Millisecond,
		RedisLostAfter: -1}) // never give up: no watch ticker on the clock, the outage lasts as long as the test says
	ran := make(chan string, 1)
	w.Handle("noop", func(_ context.Context, tk *Task) error { ran <- tk.ID(); return nil })
	runWorker(t, w)
	// Idle: the lease keeper's, maintainer's and adaptive controller's
	// tickers are armed; the fetcher blocks in Redis, not on the clock.
	clk.BlockUntil(3)

	red.Stop()
	// The fetcher's blocking pop fails; it arms its backoff timer.
	testutil.WaitFor(t, 10*time.Second, "the fetcher to back off", func() (bool, string) {
		return clk.Waiters() == 4 && w.health.down(), fmt.Sprintf("%d waiters, down %v", clk.Waiters(), w.health.down())
	})
	e0 := w.health.errs.Load()
	const advances = 20
	for i := range advances {
		clk.Advance(maxBackoff) // at least the backoff: the fetcher tries once more
		testutil.WaitFor(t, 10*time.Second, "the fetcher to fail and back off again", func() (bool, string) {
			n := w.health.errs.Load() - e0
			return n == int64(i+1) && clk.Waiters() == 4, fmt.Sprintf("%d failures after %d advances, %d waiters", n, i+1, clk.Waiters())
		})
	}
	if n := w.health.errs.Load() - e0; n != advances {
		t.Fatalf("%d failed calls over %d backoff periods, want one per period", n, advances)
	}

	red.Start()
	testutil.WaitFor(t, 20*time.Second, "the worker to resume", func() (bool, string) {
		if clk.Waiters() == 4 { // still backing off: let it try again
			clk.Advance(maxBackoff)
		}
		return !w.health.down(), "still down"
	})
	// The client's own connection broke with the restart: its first call
	// may fail once.
	testutil.WaitFor(t, 10*time.Second, "an enqueue after the restart", func() (bool, string) {
		_, err := c.Enqueue(t.Context(), NewTask("noop", nil), Queue("o"), TaskID("after-outage"))
		return err == nil || errors.Is(err, ErrDuplicateTask), fmt.Sprint(err)
	})
	select {
	case id := <-ran:
		if id != "after-outage" {
			t.Fatalf("ran %s, want after-outage", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no task ran after Redis came back")
	}
}
