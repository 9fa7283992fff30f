package taskq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/testutil"
)

// A Redis that answers LOADING is up and reading its dataset. Started
// while it loads, each of these waits for it instead of failing: NewClient
// (it used to fail with "redis unreachable: LOADING"), a script call and a
// pipeline of writes through a client opened before the restart.
func TestLoadingRedisIsWaitedOut(t *testing.T) {
	t.Parallel() // waits on a private Redis loading (main_test.go)
	red := testutil.StartRedis(t)
	before := newClient(t, red.Addr())
	q := "loading"
	if _, err := before.Enqueue(t.Context(), NewTask("work", nil), Queue(q+"-purged")); err != nil {
		t.Fatal(err)
	}
	red.RestartLoading(5000) // about a second
	ctx := t.Context()
	errs := make(chan error, 3)
	go func() {
		c, err := NewClient(ClientConfig{Redis: red.Addr()})
		if err != nil {
			errs <- fmt.Errorf("NewClient: %w", err)
			return
		}
		defer c.Close()
		_, err = c.Enqueue(ctx, NewTask("work", nil), Queue(q))
		errs <- err
	}()
	go func() {
		errs <- afterRestart(func() error {
			_, err := before.Enqueue(ctx, NewTask("work", nil), Queue(q)) // one EVALSHA
			return err
		})
	}()
	go func() { errs <- afterRestart(func() error { return before.Purge(ctx, q+"-purged") }) }() // one DEL of its keys and an SREM in one pipeline
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("a call started while Redis loaded: %v", err)
		}
	}
	if st := queueStats(t, before, q); st.Pending != 2 {
		t.Fatalf("pending %d, want 2", st.Pending)
	}
}

// afterRestart runs a call of a client opened before the restart, once
// more if it met the old server's closed connection (io.EOF: the client
// had not yet noticed the restart, which a loaded machine makes likely);
// LOADING, which the call must wait out, is not retried here.
func afterRestart(call func() error) error {
	err := call()
	if errors.Is(err, io.EOF) {
		err = call()
	}
	return err
}

// A worker whose Redis restarts and then loads for longer than
// RedisLostAfter does not give up: LOADING is a server that answers, so it
// ends the outage the restart began; once loaded, the worker serves again.
func TestWorkerWaitsOutLoadingRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a private redis-server that loads for seconds")
	}
	t.Parallel() // waits on a private Redis loading (main_test.go)
	red := testutil.StartRedis(t)
	var logs testutil.Buffer
	q := "loading"
	w := newTestWorker(t, red.Addr(), WorkerConfig{Queues: []QueueSpec{{Name: q}}, RedisLostAfter: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	var done atomic.Int64
	w.Handle("work", func(context.Context, *Task) error { done.Add(1); return nil })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()
	testutil.WaitFor(t, 10*time.Second, "the worker to start", func() (bool, string) {
		return strings.Contains(logs.String(), "taskq worker started"), logs.String()
	})
	red.RestartLoading(10000) // about 2 s: longer than RedisLostAfter
	testutil.WaitFor(t, 20*time.Second, "the load to end", func() (bool, string) {
		reply := testutil.RedisCommand(t, red.Addr(), "PING")
		return reply == "+PONG", reply
	})
	c := newClient(t, red.Addr())
	if _, err := c.Enqueue(t.Context(), NewTask("work", nil), Queue(q)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "the task enqueued after the load", func() (bool, string) {
		select {
		case err := <-runErr:
			var lost *RedisLostError
			if errors.As(err, &lost) {
				t.Fatalf("the worker gave up on a loading Redis: %v\n%s", err, logs.String())
			}
			t.Fatalf("Run returned %v", err)
		default:
		}
		return done.Load() == 1, logs.String()
	})
	if !strings.Contains(logs.String(), "loading its dataset") {
		t.Errorf("no log line says Redis was loading:\n%s", logs.String())
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Errorf("Run: %v", err)
	}
}
