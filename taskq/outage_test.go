package taskq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestRedisRestartAndOutage runs a worker through a Redis restart (AOF with
// appendfsync always) and then 10 s with Redis unreachable: the worker backs
// off without a busy loop, resumes by itself, and no task is lost.
func TestRedisRestartAndOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("waits through a 10 s Redis outage")
	}
	red := startPrivateRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	addr := red.addr()
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

	waitFor(t, 30*time.Second, "some progress", func() bool { return ran.Load() > n/5 })
	red.stop()                         // SHUTDOWN: the AOF is complete
	time.Sleep(500 * time.Millisecond) // real time: Redis stays down a moment before it restarts
	red.start()
	t.Logf("redis restarted after %d handler runs", ran.Load())

	waitFor(t, 30*time.Second, "progress after the restart", func() bool { return ran.Load() > n/2 })
	red.stop()
	before := w.health.errs.Load()
	outage := time.Now()
	time.Sleep(3 * time.Second) // real time: the backoff paces calls over a real outage
	errs := w.health.errs.Load() - before
	red.start()
	t.Logf("redis down for %s: %v failed Redis calls by the worker", time.Since(outage).Round(time.Millisecond), errs)
	// The backoff doubles from 100 ms: in 3 s a few loops each retry about
	// five times; a busy loop would fail thousands of times.
	if errs > 100 {
		t.Errorf("%v failed Redis calls in 3 s: a busy loop, not a backoff", errs)
	}

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
	red := startPrivateRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	c := newClient(t, red.addr())
	ctx := t.Context()
	const n = 1000
	for i := range n {
		if _, err := c.Enqueue(ctx, NewTask("x", nil), Queue("aof"), Tenant(fmt.Sprint("t", i%7))); err != nil {
			t.Fatal(err)
		}
	}
	red.cmd.Process.Kill()
	red.cmd.Wait()
	red.cmd = nil
	red.start()
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
