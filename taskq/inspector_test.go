package taskq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/testutil"
	"golang.org/x/sync/errgroup"
)

func newInspector(t testing.TB, addr string) *Inspector {
	t.Helper()
	i, err := NewInspector(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(i.Close)
	return i
}

func enqueue(t testing.TB, c *Client, typ string, opts ...Option) string {
	t.Helper()
	info, err := c.Enqueue(t.Context(), NewTask(typ, []byte(`{"n":1}`)), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

func listAll(t testing.TB, i *Inspector, q, state string, o ListOptions) []TaskDetail {
	t.Helper()
	var out []TaskDetail
	for pages := 0; ; pages++ {
		p, err := i.List(t.Context(), q, state, o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Tasks...)
		if p.Next == "" {
			return out
		}
		if pages > 1000 {
			t.Fatal("listing never ends")
		}
		o.Cursor = p.Next
	}
}

func ids(ts []TaskDetail) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func stateOf(t testing.TB, i *Inspector, id string) string {
	t.Helper()
	d, err := i.Get(t.Context(), "", id)
	if errors.Is(err, ErrTaskNotFound) {
		return "gone"
	}
	if err != nil {
		t.Fatal(err)
	}
	return d.State
}

// Every state is listable (paginated, with a tenant filter), get finds a
// task by id alone, and delete, run and cancel do what they say and refuse
// what they must.
func TestInspectorStatesAndOperations(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	in := newInspector(t, addr)
	ctx := t.Context()

	// Queue p has no worker: pending and scheduled tasks stay put.
	p := uniq(t, "p")
	var pendA, pendB []string
	for range 3 {
		pendA = append(pendA, enqueue(t, c, "noop", Queue(p), Tenant("a")))
	}
	for range 2 {
		pendB = append(pendB, enqueue(t, c, "noop", Queue(p), Tenant("b")))
	}
	sched := []string{enqueue(t, c, "noop", Queue(p), ProcessIn(time.Hour)), enqueue(t, c, "noop", Queue(p), ProcessIn(2*time.Hour))}

	// Queue w has a worker: retry, dead, completed and active tasks.
	w := uniq(t, "w")
	release := make(chan struct{})
	var blocked atomic.Int32
	wk := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: w}}, Concurrency: 4,
		Retry: backoff.Policy{Initial: time.Hour, Max: time.Hour}})
	wk.Handle("fail", func(context.Context, *Task) error { return errors.New("boom") })
	wk.Handle("bury", func(context.Context, *Task) error { return fmt.Errorf("no: %w", SkipRetry) })
	wk.Handle("ok", func(context.Context, *Task) error { return nil })
	wk.Handle("block", func(ctx context.Context, _ *Task) error {
		blocked.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ctx.Err()
	})
	runWorker(t, wk)
	retry := enqueue(t, c, "fail", Queue(w), MaxRetries(3))
	dead := enqueue(t, c, "bury", Queue(w))
	done := enqueue(t, c, "ok", Queue(w), Retention(time.Hour))
	active := enqueue(t, c, "block", Queue(w))
	defer close(release)
	want := map[string]string{retry: StateRetry, dead: StateDead, done: StateCompleted, active: StateActive}
	waitFor(t, 10*time.Second, "retry, dead, completed and active", func() bool {
		for id, st := range want {
			if stateOf(t, in, id) != st {
				return false
			}
		}
		return true
	})

	// Listings: every state, pages of 2, the tenant filter, dequeue order.
	if got := ids(listAll(t, in, p, StatePending, ListOptions{Limit: 2})); fmt.Sprint(got) != fmt.Sprint(append(append([]string{}, pendA...), pendB...)) {
		t.Fatalf("pending in pages of 2 = %v, want %v then %v", got, pendA, pendB)
	}
	if got := ids(listAll(t, in, p, StatePending, ListOptions{Tenant: "b", Limit: 1})); fmt.Sprint(got) != fmt.Sprint(pendB) {
		t.Fatalf("tenant b's pending = %v, want %v", got, pendB)
	}
	if got := ids(listAll(t, in, p, StateScheduled, ListOptions{Limit: 1})); fmt.Sprint(got) != fmt.Sprint(sched) {
		t.Fatalf("scheduled by due time = %v, want %v", got, sched)
	}
	for id, st := range want {
		got := listAll(t, in, w, st, ListOptions{})
		if len(got) != 1 || got[0].ID != id || got[0].State != st {
			t.Fatalf("%s list = %+v, want only %s", st, got, id)
		}
	}
	d, err := in.Get(ctx, "", dead)
	if err != nil || d.Queue != w || d.Type != "bury" || d.DeadReason == "" || d.LastError == "" || d.EndedAt == nil || string(d.Payload) != `{"n":1}` {
		t.Fatalf("get dead = %+v, %v", d, err)
	}
	if d, _ := in.Get(ctx, "", retry); d.DueAt == nil || d.Retried != 1 || d.LastError != "boom" {
		t.Fatalf("get retry = %+v", d)
	}
	if d, _ := in.Get(ctx, "", active); d.LeaseUntil == nil || d.Starts != 1 {
		t.Fatalf("get active = %+v", d)
	}
	if _, err := in.Get(ctx, "", "no-such-id"); !errors.Is(err, ErrTaskNotFound) {
		t.Fatalf("get unknown = %v", err)
	}
	if _, err := in.List(ctx, p, "flying", ListOptions{}); err == nil {
		t.Fatal("an unknown state lists")
	}
	if _, err := in.List(ctx, p, StatePending, ListOptions{Cursor: "!!"}); err == nil {
		t.Fatal("a bad cursor lists")
	}

	// delete
	if _, err := in.Delete(ctx, "", pendA[0]); err != nil || stateOf(t, in, pendA[0]) != "gone" {
		t.Fatalf("delete pending: %v, then %s", err, stateOf(t, in, pendA[0]))
	}
	if _, err := in.Delete(ctx, "", active); !errors.Is(err, ErrTaskState) {
		t.Fatalf("delete active = %v, want ErrTaskState", err)
	}
	// run
	if _, err := in.Run(ctx, "", sched[0]); err != nil || stateOf(t, in, sched[0]) != StatePending {
		t.Fatalf("run scheduled: %v, then %s", err, stateOf(t, in, sched[0]))
	}
	if _, err := in.Run(ctx, "", pendA[1]); !errors.Is(err, ErrTaskState) {
		t.Fatalf("run pending = %v, want ErrTaskState", err)
	}
	if _, err := in.Run(ctx, "", dead); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the dead task to run again and die again", func() bool {
		d, _ := in.Get(ctx, "", dead)
		return d.State == StateDead && d.Starts == 1 // started over: retried and starts reset
	})
	// cancel
	if d, err := in.Cancel(ctx, "", pendA[2], "ops@test"); err != nil || d.State != StateCancelled {
		t.Fatalf("cancel pending = %+v, %v", d, err)
	}
	got := listAll(t, in, p, StateCancelled, ListOptions{})
	if len(got) != 1 || got[0].ID != pendA[2] || got[0].CancelledBy != "ops@test" || got[0].EndedAt == nil {
		t.Fatalf("cancelled list = %+v", got)
	}
	if _, err := in.Cancel(ctx, "", done, "ops"); !errors.Is(err, ErrTaskState) {
		t.Fatalf("cancel completed = %v, want ErrTaskState", err)
	}
	if _, err := in.Cancel(ctx, "", retry, "ops"); err != nil || stateOf(t, in, retry) != StateCancelled {
		t.Fatalf("cancel retry: %v", err)
	}
	t0 := time.Now()
	if _, err := in.Cancel(ctx, "", active, "ops"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the active task's handler to stop", func() bool { return wk.inflight.len() == 0 })
	if el := time.Since(t0); el > time.Second {
		t.Fatalf("the handler stopped %v after the cancel, want within 1s", el)
	}
	if st := stateOf(t, in, active); st != StateCancelled {
		t.Fatalf("cancelled active task is %s", st)
	}
	// A cancelled task can be run again on purpose.
	if _, err := in.Run(ctx, "", pendA[2]); err != nil || stateOf(t, in, pendA[2]) != StatePending {
		t.Fatalf("run cancelled: %v", err)
	}
}

// Pausing a queue, and one tenant of a queue, stops its work from being
// dequeued while enqueues still succeed; resume (or the end of --for)
// lets it run; stats shows what is paused.
func TestPauseAndResume(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	in := newInspector(t, addr)
	ctx := t.Context()
	q := uniq(t, "q")
	var mu sync.Mutex
	ran := map[string]int{}
	wk := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 4})
	wk.Handle("count", func(_ context.Context, tk *Task) error {
		mu.Lock()
		ran[tk.Tenant()]++
		mu.Unlock()
		return nil
	})
	runWorker(t, wk)
	count := func(tenant string) int { mu.Lock(); defer mu.Unlock(); return ran[tenant] }
	push := func(tenant string, n int) {
		for range n {
			enqueue(t, c, "count", Queue(q), Tenant(tenant))
		}
	}

	// The whole queue.
	if err := in.Pause(ctx, q, "", 0); err != nil {
		t.Fatal(err)
	}
	push("a", 10)
	time.Sleep(300 * time.Millisecond) // real time: nothing may run during it
	if n := count("a"); n != 0 {
		t.Fatalf("%d tasks ran in a paused queue", n)
	}
	if st := queueStats(t, c, q); st.PausedUntil.IsZero() || st.Pending != 10 {
		t.Fatalf("stats of the paused queue: paused until %v, pending %d", st.PausedUntil, st.Pending)
	}
	if err := in.Resume(ctx, q, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the queue's tasks to run after resume", func() bool { return count("a") == 10 })

	// One tenant: the others keep running.
	if err := in.Pause(ctx, q, "a", 0); err != nil {
		t.Fatal(err)
	}
	push("a", 10)
	push("b", 10)
	waitFor(t, 5*time.Second, "tenant b's tasks", func() bool { return count("b") == 10 })
	time.Sleep(200 * time.Millisecond) // real time: paused tenant a must stay still
	if n := count("a"); n != 10 {
		t.Fatalf("paused tenant a ran %d more tasks", n-10)
	}
	if st := queueStats(t, c, q); st.Tenants["a"].PausedUntil.IsZero() || !st.PausedUntil.IsZero() {
		t.Fatalf("stats: tenant a paused until %v, queue %v", st.Tenants["a"].PausedUntil, st.PausedUntil)
	}
	if err := in.Resume(ctx, q, "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "tenant a's tasks after resume", func() bool { return count("a") == 20 })

	// A pause with a duration ends by itself.
	if err := in.Pause(ctx, q, "b", 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	push("b", 5)
	waitFor(t, 5*time.Second, "tenant b's tasks after its pause ran out", func() bool { return count("b") == 15 })
	if el := time.Since(t0); el < 350*time.Millisecond {
		t.Fatalf("tenant b paused for 400ms ran after %v", el)
	}
}

// Cancel at scale: of 1,000 running tasks on two workers (two connections,
// two canceller subscriptions), the 500 cancelled stop within 1 s of their
// cancel and are never retried; the other 500 complete.
func TestCancelRunningTasksAcrossWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 tasks on two workers")
	}
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	in := newInspector(t, addr)
	q := "cancel"
	release := make(chan struct{})
	var mu sync.Mutex
	stopped := map[string]time.Time{}
	var completed atomic.Int32
	for range 2 {
		wk := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 600, CancelGrace: 100 * time.Millisecond})
		wk.Handle("sleep", func(ctx context.Context, tk *Task) error {
			select {
			case <-release:
				completed.Add(1)
				return nil
			case <-ctx.Done():
				mu.Lock()
				stopped[tk.ID()] = time.Now()
				mu.Unlock()
				return ctx.Err()
			}
		})
		runWorker(t, wk)
	}
	var all []string
	for range 1000 {
		all = append(all, enqueue(t, c, "sleep", Queue(q)))
	}
	waitFor(t, 30*time.Second, "1,000 tasks running", func() bool { return queueStats(t, c, q).Active == 1000 })
	cancelled := all[:500]
	// Each latency runs from when its Cancel returned (the cancel is
	// recorded and published): 500 Cancels at once queue behind one
	// another in the client first, which under -race on a loaded 2-core
	// machine took up to 0.9 s before the cancel was even sent.
	asked, accepted := make([]time.Time, len(cancelled)), make([]time.Time, len(cancelled))
	var wg sync.WaitGroup
	for i, id := range cancelled {
		wg.Go(func() {
			asked[i] = time.Now()
			if _, err := in.Cancel(t.Context(), q, id, "test"); err != nil {
				t.Errorf("cancel %s: %v", id, err)
			}
			accepted[i] = time.Now()
		})
	}
	wg.Wait()
	waitFor(t, 10*time.Second, "500 handlers to stop", func() bool { mu.Lock(); defer mu.Unlock(); return len(stopped) == 500 })
	var lat, total []time.Duration
	mu.Lock()
	for i, id := range cancelled {
		at, ok := stopped[id]
		if !ok {
			t.Fatalf("cancelled task %s never stopped", id)
		}
		lat, total = append(lat, at.Sub(accepted[i])), append(total, at.Sub(asked[i]))
	}
	mu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	sort.Slice(total, func(i, j int) bool { return total[i] < total[j] })
	t.Logf("cancel returned → handler stopped: p50 %v, p99 %v, max %v (from the call: p50 %v, max %v)",
		lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1], total[len(total)/2], total[len(total)-1])
	if lat[len(lat)-1] > time.Second {
		t.Fatalf("a cancelled handler stopped %v after its cancel, want within 1s", lat[len(lat)-1])
	}
	close(release)
	waitFor(t, 30*time.Second, "the other 500 to complete", func() bool { return completed.Load() == 500 })
	// Acks are batched: wait for Redis to have them all.
	var st QueueStats
	waitFor(t, 10*time.Second, "the acks", func() bool { st = queueStats(t, c, q); return st.Active == 0 })
	if st.Cancelled != 500 || st.Retry != 0 || st.Pending != 0 || st.Active != 0 || st.Dead != 0 {
		t.Fatalf("after: cancelled %d, retry %d, pending %d, active %d, dead %d; want 500 cancelled and nothing else left", st.Cancelled, st.Retry, st.Pending, st.Active, st.Dead)
	}
	for _, id := range cancelled[:20] {
		if d, err := in.Get(t.Context(), q, id); err != nil || d.State != StateCancelled || d.Starts != 1 {
			t.Fatalf("cancelled %s: %+v, %v; want cancelled after one start", id, d, err)
		}
	}
	if stopped := len(stopped); stopped != 500 {
		t.Fatalf("%d handlers were cancelled, want 500", stopped)
	}
}

// Listing stays cheap on a long queue: with 1,000,000 pending tasks, a page
// of 100 in every state answers in well under 100 ms, and so does a page
// deep into the pending set (by cursor).
func TestInspectorListOnAMillionTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("enqueues 1,000,000 tasks")
	}
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	in := newInspector(t, addr)
	q := "big"
	const n, batch = 1_000_000, 5000
	t0 := time.Now()
	// Four enqueuers side by side: one alone leaves the client (its JSON,
	// slow under -race) and Redis each waiting on the other.
	var g errgroup.Group
	g.SetLimit(4)
	for i := 0; i < n; i += batch {
		g.Go(func() error {
			tasks := make([]*Task, batch)
			for j := range tasks {
				tasks[j] = NewTask("noop", nil)
			}
			_, err := c.EnqueueBatch(t.Context(), tasks, Queue(q), Tenant(fmt.Sprint("t", i/batch%10)))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("enqueued %d tasks in %v", n, time.Since(t0))
	enqueue(t, c, "noop", Queue(q), ProcessIn(time.Hour))
	var cursor string
	for round, state := range []string{StatePending, StatePending, StateScheduled, StateActive, StateRetry, StateDead, StateCompleted, StateCancelled} {
		var best time.Duration
		var p TaskPage
		for range 3 {
			t1 := time.Now()
			var err error
			p, err = in.List(t.Context(), q, state, ListOptions{Limit: 100, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			if el := time.Since(t1); best == 0 || el < best {
				best = el
			}
		}
		t.Logf("list %s --limit 100 (cursor %v): %d tasks in %v", state, cursor != "", len(p.Tasks), best)
		if best > 100*time.Millisecond {
			t.Errorf("list %s took %v on a 1M-task queue, want < 100 ms", state, best)
		}
		if state == StatePending && len(p.Tasks) != 100 {
			t.Fatalf("pending page has %d tasks", len(p.Tasks))
		}
		cursor = ""
		if round == 0 {
			cursor = p.Next // the second pending round reads the next page
		}
	}
	p, err := in.List(t.Context(), q, StatePending, ListOptions{Limit: 100, Tenant: "t7"})
	if err != nil || len(p.Tasks) != 100 || p.Tasks[0].Tenant != "t7" {
		t.Fatalf("tenant page: %d tasks, %v", len(p.Tasks), err)
	}
}

// A task kept after it completed (Retention) keeps its run history: a task
// that failed twice, then succeeded, shows 2 retries and 3 starts.
func TestRetainedTaskKeepsItsHistory(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	in := newInspector(t, addr)
	q := uniq(t, "kept")
	wk := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}},
		Retry: backoff.Policy{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Jitter: -1}})
	var tries atomic.Int32
	wk.Handle("flaky", func(context.Context, *Task) error {
		if tries.Add(1) <= 2 {
			return errors.New("not yet")
		}
		return nil
	})
	runWorker(t, wk)
	info, err := c.Enqueue(t.Context(), NewTask("flaky", nil, Queue(q)), Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var d TaskDetail
	waitFor(t, 10*time.Second, "the task completed", func() bool {
		d, err = in.Get(t.Context(), q, info.ID)
		return err == nil && d.State == StateCompleted
	})
	if d.Retried != 2 || d.Starts != 3 {
		t.Errorf("completed after two failures: retried %d, starts %d; want 2 and 3", d.Retried, d.Starts)
	}
}
