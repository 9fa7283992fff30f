package taskq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/testutil"
)

// attempts records each handler call's fake-clock time by task id.
type attempts struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (a *attempts) add(id string, t time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at[id] = append(a.at[id], t)
	return len(a.at[id])
}

func (a *attempts) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at[id])
}

// TestRetryPolicies, on a fake clock: a type registered WithRetry waits its
// own delays (10 s, 20 s, 40 s, no jitter) where the worker's policy would
// wait an hour; RetryAfter's delay wins over either and counts an attempt
// (out of retries, the task is dead); Snooze puts the task in scheduled,
// due at now+d, three times without counting an attempt, and it then
// succeeds with retried 0 and 3 snoozes.
func TestRetryPolicies(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	clk := fakeClock()
	// The adaptive controller off: under this test's 100% failures it
	// would scale the delays and slow polling, on the fake clock.
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 2, Clock: clk,
		Retry: backoff.Policy{Initial: time.Hour, Max: time.Hour, Jitter: -1}, Adaptive: AdaptiveConfig{Disable: true}})
	var seen attempts
	seen.at = map[string][]time.Time{}
	w.Handle("typed", func(ctx context.Context, tk *Task) error {
		seen.add(tk.ID(), clk.Now())
		return errors.New("typed fails")
	}, WithRetry(backoff.Policy{Initial: 10 * time.Second, Max: time.Minute, Jitter: -1}))
	w.Handle("after", func(ctx context.Context, tk *Task) error {
		n := seen.add(tk.ID(), clk.Now())
		return fmt.Errorf("attempt %d: %w", n, RetryAfter(time.Duration(n)*7*time.Second, errors.New("rate limited")))
	})
	w.Handle("snooze", func(ctx context.Context, tk *Task) error {
		if seen.add(tk.ID(), clk.Now()) <= 3 {
			return Snooze(5 * time.Second)
		}
		return nil
	})
	runWorker(t, w)
	in, err := NewInspector(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()

	// next waits for attempt n of id, then checks that the task waits in
	// state, due want after it, and moves the clock there.
	next := func(id string, n int, state string, want time.Duration) TaskDetail {
		t.Helper()
		wantState(t, fmt.Sprintf("attempt %d of %s, then %s", n, id, state), func() (bool, string) {
			d, err := in.Get(ctx, q, id)
			return seen.count(id) == n && err == nil && d.State == state, fmt.Sprintf("%d attempts, %+v, %v; clock %v", seen.count(id), d, err, clk.Now())
		})
		d, _ := in.Get(ctx, q, id)
		seen.mu.Lock()
		last := seen.at[id][n-1]
		seen.mu.Unlock()
		if d.DueAt == nil || !d.DueAt.Equal(last.Add(want)) {
			t.Fatalf("%s after attempt %d: due %v; want %v after the attempt (%v)", id, n, d.DueAt, want, last.Add(want))
		}
		clk.Advance(want)
		return d
	}

	typed, _ := c.Enqueue(ctx, NewTask("typed", nil), Queue(q), MaxRetries(3))
	for i, want := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second} {
		if d := next(typed.ID, i+1, "retry", want); d.Retried != i+1 {
			t.Fatalf("typed: retried %d after attempt %d", d.Retried, i+1)
		}
	}
	waitFor(t, 20*time.Second, "typed dead after 4 attempts", func() bool {
		d, err := in.Get(ctx, q, typed.ID)
		return err == nil && d.State == "dead" && seen.count(typed.ID) == 4
	})

	after, _ := c.Enqueue(ctx, NewTask("after", nil), Queue(q), MaxRetries(2))
	next(after.ID, 1, "retry", 7*time.Second)
	d := next(after.ID, 2, "retry", 14*time.Second)
	if d.Retried != 2 || d.LastError != "attempt 2: retry after 14s: rate limited" {
		t.Fatalf("after: retried %d, last error %q", d.Retried, d.LastError)
	}
	waitFor(t, 20*time.Second, "after dead after 3 attempts", func() bool {
		d, err := in.Get(ctx, q, after.ID)
		return err == nil && d.State == "dead" && seen.count(after.ID) == 3
	})

	snoozed, _ := c.Enqueue(ctx, NewTask("snooze", nil), Queue(q), MaxRetries(1))
	for i := range 3 {
		// starts 0: the next start is not counted as a re-delivery.
		if d := next(snoozed.ID, i+1, "scheduled", 5*time.Second); d.Retried != 0 || d.Snoozes != i+1 || d.LastError != "" || d.Starts != 0 {
			t.Fatalf("snoozed %d times: retried %d, snoozes %d, starts %d, last error %q", i+1, d.Retried, d.Snoozes, d.Starts, d.LastError)
		}
	}
	waitFor(t, 20*time.Second, "the snoozed task completed", func() bool {
		st := queueStats(t, c, q)
		return st.Completed == 1 && seen.count(snoozed.ID) == 4
	})
	if st := queueStats(t, c, q); st.FailedTotal != 4+3 {
		t.Fatalf("failed_total %d; want 7 (typed's 4, after's 3, no snooze)", st.FailedTotal)
	}
}

func wantState(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, what, cond)
}
