package taskq

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

// Redis gone for good: after RedisLostAfter without an answer the worker
// cancels its running handler and Run returns a *RedisLostError naming the
// address; an outage shorter than that is ridden out (the worker reconnects
// and finishes every task, AOF always: none lost).
func TestRedisLostAfter(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and restarts a private redis-server")
	}
	red := testutil.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	addr := red.Addr()
	c := newClient(t, addr)
	q := "lost"
	const n = 200
	for range n {
		enqueue(t, c, "work", Queue(q))
	}
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 4, RedisLostAfter: 3 * time.Second,
		HeartbeatInterval: 200 * time.Millisecond, LeaseDuration: 5 * time.Second})
	var done atomic.Int64
	gate := make(chan struct{}, n)
	w.Handle("work", func(ctx context.Context, _ *Task) error {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		done.Add(1)
		return nil
	})
	blocked := make(chan struct{})
	var cancelled atomic.Bool
	w.Handle("block", func(ctx context.Context, _ *Task) error {
		close(blocked)
		<-ctx.Done()
		cancelled.Store(true)
		return ctx.Err()
	})
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(t.Context()) }()
	for range n / 2 {
		gate <- struct{}{}
	}
	waitFor(t, 10*time.Second, "half the tasks", func() bool { return done.Load() >= n/2 })

	// A 1 s outage: shorter than RedisLostAfter, so the worker rides it out.
	red.Stop()
	time.Sleep(time.Second) // real time: the outage is what is tested
	red.Start()
	for range n / 2 {
		gate <- struct{}{}
	}
	waitFor(t, 30*time.Second, "every task after the short outage", func() bool { return done.Load() == n })
	select {
	case err := <-runErr:
		t.Fatalf("Run returned %v after a short outage", err)
	default:
	}

	// Gone for good, with a task running.
	enqueue(t, c, "block", Queue(q))
	<-blocked
	red.Stop()
	t0 := time.Now()
	select {
	case err := <-runErr:
		var lost *RedisLostError
		if !errors.As(err, &lost) || !errors.Is(err, ErrRedisLost) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("Run = %v, want a *RedisLostError naming %s", err, addr)
		}
		if el := time.Since(t0); el < 3*time.Second || el > 8*time.Second {
			t.Fatalf("gave up after %v, want about RedisLostAfter (3s)", el)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker never gave up on a Redis that is gone")
	}
	if !cancelled.Load() {
		t.Fatal("the running handler was not cancelled")
	}
}

// By default (RedisLostAfter zero) a worker gives up on a Redis that stays
// unreachable for DefaultRedisLostAfter, 1 min, as seed §5.2 says it shuts
// down on a permanent loss; a negative RedisLostAfter never gives up. The
// outage is timed on fake clocks: an hour passes in no time.
func TestRedisLostByDefault(t *testing.T) {
	red := testutil.StartRedis(t)
	byDefault, never := fakeClock(), fakeClock()
	wd := newTestWorker(t, red.Addr(), WorkerConfig{Queues: []QueueSpec{{Name: "lost"}}, Clock: byDefault})
	wn := newTestWorker(t, red.Addr(), WorkerConfig{Queues: []QueueSpec{{Name: "lost"}}, Clock: never, RedisLostAfter: -1})
	if wd.cfg.RedisLostAfter != DefaultRedisLostAfter || DefaultRedisLostAfter != time.Minute {
		t.Fatalf("default RedisLostAfter %v, want DefaultRedisLostAfter (1m)", wd.cfg.RedisLostAfter)
	}
	errd, errn := make(chan error, 1), make(chan error, 1)
	go func() { errd <- wd.Run(t.Context()) }()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { errn <- wn.Run(ctx) }()
	waitFor(t, 10*time.Second, "both workers running", func() bool {
		return wd.State() == StateRunning && wn.State() == StateRunning
	})
	red.Kill() // gone, no goodbye
	waitFor(t, 10*time.Second, "both workers to see the outage", func() bool { return wd.health.down() && wn.health.down() })

	byDefault.Advance(59 * time.Second)
	never.Advance(time.Hour)
	byDefault.Advance(2 * time.Second)
	select {
	case err := <-errd:
		var lost *RedisLostError
		if !errors.As(err, &lost) || lost.For < time.Minute || lost.For > 2*time.Minute || !strings.Contains(err.Error(), red.Addr()) {
			t.Fatalf("Run = %v, want a *RedisLostError naming %s after about 1m", err, red.Addr())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the default worker did not give up after a minute without Redis")
	}
	select {
	case err := <-errn:
		t.Fatalf("the worker with RedisLostAfter < 0 gave up after an hour: %v", err)
	default:
	}
	if wn.State() != StateRunning {
		t.Fatalf("the worker with RedisLostAfter < 0: state %v, want running", wn.State())
	}
	cancel()
	if err := <-errn; err != nil {
		t.Fatalf("Run with RedisLostAfter < 0 after cancel: %v", err)
	}
}
