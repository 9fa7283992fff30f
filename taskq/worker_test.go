package taskq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ptestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

func TestMain(m *testing.M) {
	testutil.RaiseParallel(waitingParallel)
	goleak.VerifyTestMain(m,
		// rueidis keeps a background goroutine per process for its
		// connection-lifetime timer wheel.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe).backgroundPing.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"), // a failed dial's retry delay: ends by itself
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
		// A cluster client closes connections of moved slots 5 s after a
		// topology refresh, in a goroutine that outlives Close.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	)
}

func newTestWorker(t *testing.T, addr string, cfg WorkerConfig) *Worker {
	t.Helper()
	cfg.Redis = addr
	// Tests share one Redis: a stealing worker would run other tests' tasks.
	cfg.DisableSteal = true
	if cfg.Retry == (backoff.Policy{}) {
		cfg.Retry = backoff.Policy{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
	}
	if cfg.MaintainInterval == 0 {
		cfg.MaintainInterval = 50 * time.Millisecond
	}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestRetriesThenSuccessAndDeadLetter(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 4})
	var calls sync.Map // id -> *atomic.Int32
	w.Handle("flaky", func(ctx context.Context, tk *Task) error {
		v, _ := calls.LoadOrStore(tk.ID(), new(atomic.Int32))
		if v.(*atomic.Int32).Add(1) <= 2 {
			return errors.New("transient")
		}
		return nil
	})
	w.Handle("always", func(ctx context.Context, tk *Task) error { return errors.New("boom") })
	w.Handle("skip", func(ctx context.Context, tk *Task) error {
		return fmt.Errorf("bad payload %q: %w", tk.Payload, SkipRetry)
	})
	runWorker(t, w)

	okInfo, err := c.Enqueue(ctx, NewTask("flaky", nil), Queue(q), MaxRetries(5))
	if err != nil {
		t.Fatal(err)
	}
	deadInfo, _ := c.Enqueue(ctx, NewTask("always", nil), Queue(q), MaxRetries(2))
	skipInfo, _ := c.Enqueue(ctx, NewTask("skip", []byte("x")), Queue(q), MaxRetries(9))
	waitFor(t, 20*time.Second, "one completed and two dead", func() bool {
		st := queueStats(t, c, q)
		return st.Completed == 1 && st.Dead == 2
	})
	v, _ := calls.Load(okInfo.ID)
	if n := v.(*atomic.Int32).Load(); n != 3 {
		t.Errorf("flaky task ran %d times, want 3", n)
	}
	dead, err := c.DeadLetters(ctx, q, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]DeadTask{}
	for _, d := range dead {
		got[d.ID] = d
	}
	if d := got[deadInfo.ID]; d.Reason != "retries exhausted (max 2)" || d.LastError != "boom" {
		t.Errorf("dead task: reason %q, last error %q", d.Reason, d.LastError)
	}
	if d := got[skipInfo.ID]; d.Reason != "handler asked to skip retry" || !strings.Contains(d.LastError, "bad payload") {
		t.Errorf("skip task: reason %q, last error %q", d.Reason, d.LastError)
	}
	st := queueStats(t, c, q)
	// flaky: 3 attempts (2 failed); always: 3 (3 failed); skip: 1 (1 failed).
	if st.ProcessedTotal != 7 || st.FailedTotal != 6 {
		t.Errorf("processed_total %d failed_total %d, want 7 and 6", st.ProcessedTotal, st.FailedTotal)
	}
	// Requeue from the DLQ: the "always" task runs again and dies again.
	if n, err := c.RequeueDead(ctx, q, deadInfo.ID); err != nil || n != 1 {
		t.Fatalf("RequeueDead = %d, %v", n, err)
	}
	waitFor(t, 20*time.Second, "requeued task to die again", func() bool {
		st := queueStats(t, c, q)
		return st.Dead == 2 && st.ProcessedTotal == 10
	})
	if n, err := c.DeleteDead(ctx, q); err != nil || n != 2 {
		t.Fatalf("DeleteDead = %d, %v", n, err)
	}
	if st := queueStats(t, c, q); st.Dead != 0 {
		t.Errorf("dead = %d after delete", st.Dead)
	}
}

// Bad input of every kind ends in the dead-letter set with a reason, and
// the worker keeps serving good tasks.
func TestBadInputGoesToDeadLetters(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	r := openRDB(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 2})
	w.Handle("strict", func(ctx context.Context, tk *Task) error {
		if string(tk.Payload) != "ok" {
			return fmt.Errorf("payload must be \"ok\": %w", SkipRetry)
		}
		return nil
	})
	w.Handle("crash", func(ctx context.Context, tk *Task) error { panic("nil map write") })
	runWorker(t, w)

	// Malformed bytes, a message without a type and a missing message, put
	// straight into Redis.
	k := rdb.QueueKeys(q)
	raw := r.Client()
	put := func(id, msg string, withMsg bool) {
		member := "evil\x00ff" + fmt.Sprintf("%016x", 1) + "\x00" + id
		cmds := []string{}
		_ = cmds
		if withMsg {
			if err := raw.Do(ctx, raw.B().Hset().Key(k[rdb.KTasks]).FieldValue().FieldValue(id, msg).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		if err := raw.Do(ctx, raw.B().Zadd().Key(k[rdb.KPending]).ScoreMember().ScoreMember(0, member).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := raw.Do(ctx, raw.B().Zadd().Key(k[rdb.KTenants]).ScoreMember().ScoreMember(0, "evil").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	put("garbage", "\xff\x00{not json", true)
	put("notype", `{"id":"notype","queue":"`+q+`","tenant":"evil"}`, true)
	put("nomsg", "", false)
	raw.Do(ctx, raw.B().Lpush().Key(k[rdb.KWake]).Element("1").Build())

	unknown, _ := c.Enqueue(ctx, NewTask("no-such-type", nil), Queue(q))
	rejected, _ := c.Enqueue(ctx, NewTask("strict", []byte("nope")), Queue(q))
	panicked, _ := c.Enqueue(ctx, NewTask("crash", nil), Queue(q))
	good, _ := c.Enqueue(ctx, NewTask("strict", []byte("ok")), Queue(q))

	waitFor(t, 20*time.Second, "six dead and one completed", func() bool {
		st := queueStats(t, c, q)
		return st.Dead == 6 && st.Completed == 1
	})
	dead, err := c.DeadLetters(ctx, q, 10)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, d := range dead {
		reasons[d.ID] = d.Reason
	}
	want := map[string]string{
		"garbage":   "malformed task: bad JSON",
		"notype":    `malformed task: missing field "type"`,
		"nomsg":     "malformed task: message missing",
		unknown.ID:  `unknown task type "no-such-type"`,
		rejected.ID: "handler asked to skip retry",
		panicked.ID: "handler panicked: nil map write",
	}
	for id, prefix := range want {
		if !strings.HasPrefix(reasons[id], prefix) {
			t.Errorf("task %s: reason %q, want prefix %q", id, reasons[id], prefix)
		}
	}
	if _, ok := reasons[good.ID]; ok {
		t.Errorf("the good task is in the dead-letter set")
	}
}

// A task that outruns its timeout and ignores cancellation is abandoned
// after the grace period and retried; the worker does not hang.
func TestTimeoutAbandonsStuckHandler(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 2, CancelGrace: 100 * time.Millisecond})
	release := make(chan struct{})
	var attempts atomic.Int32
	w.Handle("stuck", func(ctx context.Context, tk *Task) error {
		if attempts.Add(1) == 1 {
			<-release // ignores ctx
		}
		return nil
	})
	var respects atomic.Int32
	w.Handle("polite", func(ctx context.Context, tk *Task) error {
		if respects.Add(1) == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	stop := runWorker(t, w)
	c.Enqueue(ctx, NewTask("stuck", nil), Queue(q), Timeout(100*time.Millisecond))
	c.Enqueue(ctx, NewTask("polite", nil), Queue(q), Timeout(100*time.Millisecond))
	waitFor(t, 20*time.Second, "both tasks completed on their second attempt", func() bool {
		return queueStats(t, c, q).Completed == 2
	})
	close(release)
	stop()
	if a, r := attempts.Load(), respects.Load(); a != 2 || r != 2 {
		t.Errorf("attempts: stuck %d, polite %d; want 2 each", a, r)
	}
	if st := queueStats(t, c, q); st.FailedTotal != 2 || st.DuplicatesTotal != 0 {
		t.Errorf("failed_total %d duplicates %d, want 2 and 0", st.FailedTotal, st.DuplicatesTotal)
	}
}

// Shutdown: stop fetching, wait ShutdownTimeout, cancel, put unfinished
// tasks back without counting a failure, mark the worker stopped.
func TestGracefulShutdownRequeues(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 3, ShutdownTimeout: 200 * time.Millisecond})
	started := make(chan struct{}, 10)
	w.Handle("long", func(ctx context.Context, tk *Task) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	w.Handle("quick", func(ctx context.Context, tk *Task) error { return nil })
	stop := runWorker(t, w)
	enqueueTenant(t, c, q, "x", 0, 0)
	for range 3 {
		c.Enqueue(ctx, NewTask("long", nil), Queue(q))
	}
	for range 3 {
		<-started
	}
	for range 5 {
		c.Enqueue(ctx, NewTask("quick", nil), Queue(q))
	}
	begin := time.Now()
	stop()
	if el := time.Since(begin); el > 5*time.Second {
		t.Errorf("shutdown took %s", el)
	}
	st := queueStats(t, c, q)
	if st.Pending != 8 || st.Active != 0 || st.FailedTotal != 0 || st.Retry != 0 {
		t.Errorf("after shutdown: pending %d active %d failed %d retry %d; want 8 0 0 0", st.Pending, st.Active, st.FailedTotal, st.Retry)
	}
	all, _ := c.Stats(ctx)
	found := false
	for _, rec := range all.Workers {
		if rec.ID == w.ID() {
			found = true
			if rec.State != "stopped" || rec.Processed != 0 || rec.Failed != 0 {
				t.Errorf("worker record: state %q, processed %d, failed %d; want stopped, 0, 0", rec.State, rec.Processed, rec.Failed)
			}
		}
	}
	if !found {
		t.Errorf("no record of worker %s in Redis after its shutdown", w.ID())
	}
	// A new worker runs them all, and none counts as a duplicate.
	w2 := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 3})
	w2.Handle("long", func(ctx context.Context, tk *Task) error { return nil })
	w2.Handle("quick", func(ctx context.Context, tk *Task) error { return nil })
	runWorker(t, w2)
	waitFor(t, 10*time.Second, "all 8 completed", func() bool { return queueStats(t, c, q).Completed == 8 })
	if st := queueStats(t, c, q); st.DuplicatesTotal != 0 {
		t.Errorf("duplicates %d after a graceful requeue, want 0", st.DuplicatesTotal)
	}
}

// A worker that dies holding tasks loses them to another worker after the
// lease, and the re-runs are counted as duplicates.
func TestLeaseExpiryRedelivers(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	r := openRDB(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	enqueueTenant(t, c, q, "x", 0, 5)
	// A "dead worker": takes the tasks with a short lease and never returns.
	now := time.Now()
	deq, err := r.Dequeue(ctx, []string{q}, 5, now, now.Add(300*time.Millisecond))
	ds := deq.Tasks
	if err != nil || len(ds) != 5 {
		t.Fatalf("dequeue: %d, %v", len(ds), err)
	}
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}})
	w.Handle("noop", func(ctx context.Context, tk *Task) error { return nil })
	runWorker(t, w)
	waitFor(t, 10*time.Second, "5 completed", func() bool { return queueStats(t, c, q).Completed == 5 })
	if st := queueStats(t, c, q); st.DuplicatesTotal != 5 || st.ReapedTotal != 5 {
		t.Errorf("duplicates %d reaped %d, want 5 and 5", st.DuplicatesTotal, st.ReapedTotal)
	}
}

func TestPriorityAndScheduled(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	for i := range 3 {
		c.Enqueue(ctx, NewTask("noop", []byte(fmt.Sprint("low", i))), Queue(q))
	}
	c.Enqueue(ctx, NewTask("noop", []byte("high")), Queue(q), Priority(9))
	c.Enqueue(ctx, NewTask("noop", []byte("later")), Queue(q), ProcessIn(300*time.Millisecond))
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 1})
	var mu sync.Mutex
	var order []string
	w.Handle("noop", func(ctx context.Context, tk *Task) error {
		mu.Lock()
		order = append(order, string(tk.Payload))
		mu.Unlock()
		return nil
	})
	runWorker(t, w)
	waitFor(t, 10*time.Second, "5 completed", func() bool { return queueStats(t, c, q).Completed == 5 })
	mu.Lock()
	defer mu.Unlock()
	want := []string{"high", "low0", "low1", "low2", "later"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("order %v, want %v", order, want)
	}
}

func TestResultsWithRetention(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	var okCalls, failCalls atomic.Int32
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}},
		OnSuccess: func(*Task) { okCalls.Add(1) },
		OnFailure: func(_ *Task, _ error, dead bool) { failCalls.Add(1) },
	})
	w.Handle("echo", func(ctx context.Context, tk *Task) error {
		tk.SetResult(append([]byte("re:"), tk.Payload...))
		return nil
	})
	runWorker(t, w)
	kept, _ := c.Enqueue(ctx, NewTask("echo", []byte("a")), Queue(q), Retention(300*time.Millisecond))
	gone, _ := c.Enqueue(ctx, NewTask("echo", []byte("b")), Queue(q))
	waitFor(t, 10*time.Second, "2 completed", func() bool { return queueStats(t, c, q).Completed == 2 })
	waitFor(t, 5*time.Second, "ack to land", func() bool {
		res, _ := c.Result(ctx, q, kept.ID)
		return string(res) == "re:a"
	})
	if res, _ := c.Result(ctx, q, gone.ID); res != nil {
		t.Errorf("result of a task without retention kept: %q", res)
	}
	waitFor(t, 10*time.Second, "retained result to expire", func() bool {
		res, _ := c.Result(ctx, q, kept.ID)
		return res == nil && queueStats(t, c, q).Retained == 0
	})
	if okCalls.Load() != 2 || failCalls.Load() != 0 {
		t.Errorf("callbacks: success %d failure %d", okCalls.Load(), failCalls.Load())
	}
}

// Work stealing runs on a private Redis: a stealing worker takes work from
// every queue it can see.
func TestWorkStealing(t *testing.T) {
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	ctx := t.Context()
	enqueueTenant(t, c, "big", "x", 0, 60)
	enqueueTenant(t, c, "small", "x", 0, 20)
	enqueueTenant(t, c, "own", "x", 0, 10)
	w, err := NewWorker(WorkerConfig{Redis: addr, Queues: []QueueSpec{{Name: "own"}}, Concurrency: 1,
		StealInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	w.Handle("noop", func(ctx context.Context, tk *Task) error {
		mu.Lock()
		order = append(order, tk.Queue())
		mu.Unlock()
		time.Sleep(time.Millisecond) // real time: the handler's work
		return nil
	})
	w.stealer.refresh(ctx)
	stop := runWorker(t, w)
	waitFor(t, 10*time.Second, "all queues drained", func() bool {
		st, _ := c.Stats(ctx)
		return st.Queues["big"].Completed == 60 && st.Queues["small"].Completed == 20 && st.Queues["own"].Completed == 10
	})
	// A paused queue with a backlog is a steal target that gives nothing:
	// each dequeue that tries it counts a miss.
	if err := newInspector(t, addr).Pause(ctx, "paused", "", time.Hour); err != nil {
		t.Fatal(err)
	}
	enqueueTenant(t, c, "paused", "x", 0, 5, Queue("paused"))
	waitFor(t, 20*time.Second, "a steal miss", func() bool { return ptestutil.ToFloat64(w.m.stealMisses) > 0 })
	stop()
	if s := w.stealer.steals.Load(); s != 80 {
		t.Errorf("steals %d, want 80", s)
	}
	if big, small := ptestutil.ToFloat64(w.m.steals.WithLabelValues("big")), ptestutil.ToFloat64(w.m.steals.WithLabelValues("small")); big != 60 || small != 20 {
		t.Errorf("taskq_steals_total: big %v small %v, want 60 and 20", big, small)
	}
	mu.Lock()
	defer mu.Unlock()
	// Assigned work first, then the most loaded other queue.
	for i, q := range order[:10] {
		if q != "own" {
			t.Fatalf("task %d came from %q before the assigned queue was empty: %v", i, q, order[:12])
		}
	}
	if order[10] != "big" {
		t.Errorf("first stolen task from %q, want the most loaded queue \"big\"", order[10])
	}
	_ = ctx
}

// TestStolenTaskWithoutHandlerGoesBack: an idle worker steals from a queue
// whose task type it has no handler for: the task goes back to that queue
// uncounted (not to the dead letters: it is the wrong worker, not a bad
// task), the queue is no steal target for a while (one steal, not a
// ping-pong), and the queue's own worker then runs every task.
func TestStolenTaskWithoutHandlerGoesBack(t *testing.T) {
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	ctx := t.Context()
	batch := make([]*Task, 30)
	for i := range batch {
		batch[i] = NewTask("resize", nil)
	}
	if _, err := c.EnqueueBatch(ctx, batch, Queue("images")); err != nil {
		t.Fatal(err)
	}
	mail, err := NewWorker(WorkerConfig{Redis: addr, Queues: []QueueSpec{{Name: "mail"}}, Concurrency: 4,
		StealInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var emails atomic.Int64
	mail.Handle("email", func(context.Context, *Task) error { emails.Add(1); return nil })
	mail.stealer.refresh(ctx)
	stopMail := runWorker(t, mail)
	waitFor(t, 10*time.Second, "a steal from images", func() bool { return mail.stealer.steals.Load() > 0 })
	waitFor(t, 10*time.Second, "the stolen tasks back", func() bool { return queueStats(t, c, "images").Pending == 30 })
	// Another queue gets work the mail worker can run: it steals that once a
	// refresh has seen it, with images still refused.
	if _, err := c.Enqueue(ctx, NewTask("email", nil), Queue("news")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the news task stolen and run", func() bool { return emails.Load() == 1 })
	steals := int64(ptestutil.ToFloat64(mail.m.steals.WithLabelValues("images")))
	if st := queueStats(t, c, "images"); st.Dead != 0 || st.Pending != 30 || st.FailedTotal != 0 {
		t.Fatalf("images after the mail worker stole: %+v; want 30 pending, none dead or failed", st)
	}
	if steals > int64(mail.cfg.Concurrency+mail.cfg.Prefetch) {
		t.Errorf("the mail worker stole %d tasks of images, want one dequeue's worth at most (the queue refused after)", steals)
	}
	stopMail()

	images := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: "images"}}, DisableSteal: true})
	var ran atomic.Int64
	images.Handle("resize", func(context.Context, *Task) error { ran.Add(1); return nil })
	runWorker(t, images)
	waitFor(t, 10*time.Second, "images' own worker ran all 30", func() bool { return ran.Load() == 30 })
	if st := queueStats(t, c, "images"); st.DuplicatesTotal != 0 {
		t.Errorf("duplicates %d: a task given back must not count as a re-delivery", st.DuplicatesTotal)
	}
}

// Steal targets: other queues with a backlog, most loaded first, the queue
// stolen from last moved to the end; empty and assigned queues never.
func TestStealTargetOrder(t *testing.T) {
	addr := testutil.StartRedis(t).Addr()
	c := newClient(t, addr)
	enqueueTenant(t, c, "big", "x", 0, 30, Queue("big"))
	enqueueTenant(t, c, "mid", "x", 0, 20, Queue("mid"))
	enqueueTenant(t, c, "small", "x", 0, 10, Queue("small"))
	enqueueTenant(t, c, "own", "x", 0, 50, Queue("own"))
	c.r.RegisterQueues(t.Context(), "empty")
	w, err := NewWorker(WorkerConfig{Redis: addr, Queues: []QueueSpec{{Name: "own"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.r.Close()
	ctx := t.Context()
	w.stealer.refresh(ctx)
	if got := fmt.Sprint(w.stealer.current()); got != "[big mid small]" {
		t.Errorf("targets %s, want [big mid small]", got)
	}
	w.stealer.noteSteal("big")
	w.stealer.refresh(ctx)
	if got := fmt.Sprint(w.stealer.current()); got != "[mid small big]" {
		t.Errorf("after stealing from big: targets %s, want [mid small big]", got)
	}
	f := newFetcher(fetcherParams{queues: w.cfg.Queues, strict: w.cfg.Strict, stealer: w.stealer})
	order, n := f.order()
	if fmt.Sprint(order) != "[own mid small big]" || n != 1 {
		t.Errorf("dequeue order %v (%d assigned), want [own mid small big] (1)", order, n)
	}
}

func TestDeadlineEndsAttempt(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}})
	w.Handle("wait", func(ctx context.Context, tk *Task) error {
		<-ctx.Done()
		return ctx.Err()
	})
	runWorker(t, w)
	c.Enqueue(t.Context(), NewTask("wait", nil), Queue(q), Deadline(time.Now().Add(200*time.Millisecond)), MaxRetries(0))
	waitFor(t, 10*time.Second, "dead after the deadline", func() bool { return queueStats(t, c, q).Dead == 1 })
	dead, _ := c.DeadLetters(t.Context(), q, 1)
	if len(dead) != 1 || dead[0].LastError != context.DeadlineExceeded.Error() {
		t.Errorf("dead: %+v, want last error %q", dead, context.DeadlineExceeded)
	}
}

// A worker's identity and lifecycle (seed §1): a unique id of host, pid and
// random part; the documented defaults filled in; bad configuration refused;
// New → Running → Stopped, and a second Run refused.
func TestWorkerIdentityAndLifecycle(t *testing.T) {
	addr := testRedis(t)
	a, b := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: uniq(t, "a")}}}), newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: uniq(t, "b")}}})
	host, _ := os.Hostname()
	prefix := fmt.Sprintf("%s:%d:", host, os.Getpid())
	if a.ID() == b.ID() || !strings.HasPrefix(a.ID(), prefix) || len(a.ID()) != len(prefix)+6 {
		t.Fatalf("ids %q and %q; want two different host:pid:random ids", a.ID(), b.ID())
	}
	cfg := a.cfg
	if cfg.Concurrency != 10 || cfg.LeaseDuration != 30*time.Second || cfg.HeartbeatInterval != 10*time.Second || cfg.ShutdownTimeout != 8*time.Second ||
		cfg.CancelGrace != 5*time.Second || cfg.IdleWait != time.Second || cfg.Adaptive.Interval != 5*time.Second || cfg.RedisLostAfter != time.Minute {
		t.Fatalf("defaults not as documented: %+v", cfg)
	}
	for _, bad := range []WorkerConfig{
		{Redis: addr, Queues: []QueueSpec{{Name: "x{y}"}}},
		{Redis: addr, Queues: []QueueSpec{{Name: "q"}, {Name: "q"}}},
		{Redis: addr, Queues: []QueueSpec{{Name: "q", Weight: -1}}},
		{Redis: addr, Concurrency: -1},
		{Redis: ""},
	} {
		if _, err := NewWorker(bad); err == nil {
			t.Errorf("NewWorker(%+v) accepted", bad)
		}
	}
	if a.State() != StateNew {
		t.Fatalf("state before Run: %v", a.State())
	}
	stop := runWorker(t, a)
	waitFor(t, 5*time.Second, "running", func() bool { return a.State() == StateRunning })
	if err := a.Run(t.Context()); !errors.Is(err, ErrWorkerStarted) {
		t.Fatalf("second Run = %v, want ErrWorkerStarted", err)
	}
	stop()
	if a.State() != StateStopped {
		t.Fatalf("state after Run returned: %v", a.State())
	}
}
