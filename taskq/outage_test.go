package taskq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

// TestRedisRestartAndOutage runs a worker through a Redis restart (AOF with
// appendfsync always) and then an outage that lasts until the worker has
// failed and backed off several times: it resumes by itself and no task is
// lost. (That the backoff is paced by the clock, not a busy loop, is
// TestOutageBacksOffOnTheClock.)
func TestRedisRestartAndOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3000 tasks through a Redis restart and an outage")
	}
	t.Parallel() // waits on a private Redis down and the worker backing off (main_test.go)
	red := testutil.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	addr := red.Addr()
	c := newClient(t, addr)
	ctx := t.Context()
	const n = 3000
	q := "outage"
	tasks := make([]*Task, n)
	for i := range tasks {
		tasks[i] = NewTask("work", nil, Queue(q))
	}
	if _, err := c.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 8,
		HeartbeatInterval: 200 * time.Millisecond, LeaseDuration: 5 * time.Second})
	var ran atomic.Int64
	w.Handle("work", func(ctx context.Context, tk *Task) error {
		ran.Add(1)
		time.Sleep(2 * time.Millisecond) // real time: the handler's work
		return nil
	})
	stop := runWorker(t, w)
	// down stops Redis until the worker has seen `failures` more failed calls.
	down := func(failures int64) {
		before := w.health.errs.Load()
		red.Stop() // SHUTDOWN: the AOF is complete
		waitFor(t, 30*time.Second, "the worker to fail and back off", func() bool {
			return w.health.errs.Load()-before >= failures
		})
		t.Logf("redis down until the worker failed %d calls", w.health.errs.Load()-before)
		red.Start()
	}

	waitFor(t, 30*time.Second, "some progress", func() bool { return ran.Load() > n/5 })
	down(1)
	t.Logf("redis restarted after %d handler runs", ran.Load())
	waitFor(t, 30*time.Second, "progress after the restart", func() bool { return ran.Load() > n/2 })
	down(5)

	waitFor(t, 60*time.Second, "all tasks completed", func() bool {
		st, err := c.Stats(ctx)
		if err != nil {
			return false
		}
		s := st.Queues[q]
		return s.Completed == n && s.Pending == 0 && s.Active == 0
	})
	stop()
	st := queueStats(t, c, q)
	t.Logf("completed %d, handler runs %d, duplicates %d, failed %d", st.Completed, ran.Load(), st.DuplicatesTotal, st.FailedTotal)
	if st.Dead != 0 || st.Retry != 0 {
		t.Errorf("dead %d retry %d, want 0", st.Dead, st.Retry)
	}
}

// With appendfsync always, every enqueue acknowledged before Redis is
// killed (SIGKILL, no clean shutdown) is there after the restart.
func TestEnqueueSurvivesRedisKillWithAOF(t *testing.T) {
	red := testutil.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	c := newClient(t, red.Addr())
	ctx := t.Context()
	const n = 1000
	for i := range n {
		if _, err := c.Enqueue(ctx, NewTask("x", nil), Queue("aof"), Tenant(fmt.Sprint("t", i%7))); err != nil {
			t.Fatal(err)
		}
	}
	red.Kill()
	red.Start()
	var st QueueStats
	waitFor(t, 10*time.Second, "stats after restart", func() bool {
		s, err := c.Stats(ctx)
		if err != nil {
			return false
		}
		st = s.Queues["aof"]
		return true
	})
	if st.Pending != n || st.Enqueued != n {
		t.Errorf("after kill -9 and restart: pending %d, enqueued_total %d; want %d", st.Pending, st.Enqueued, n)
	}
}
