package taskq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
)

func TestAdaptRules(t *testing.T) {
	cfg := AdaptiveConfig{}
	cfg.defaults()
	base := time.Second
	tests := []struct {
		name string
		in   adaptState
		win  windowStats
		want adaptState
	}{
		{"high error rate doubles retry delays", adaptState{1, base}, windowStats{processed: 10, failed: 9, errRate: 0.9}, adaptState{2, base}},
		{"capped", adaptState{16, base}, windowStats{processed: 10, failed: 10, errRate: 1}, adaptState{16, base}},
		{"recovery halves back", adaptState{8, base}, windowStats{processed: 10, errRate: 0}, adaptState{4, base}},
		{"never below 1", adaptState{1, base}, windowStats{}, adaptState{1, base}},
		{"steal contention slows stealing", adaptState{1, base}, windowStats{steals: 1, misses: 9}, adaptState{1, 2 * base}},
		{"steal interval capped at 8x", adaptState{1, 8 * base}, windowStats{misses: 10}, adaptState{1, 8 * base}},
		{"no contention speeds back up", adaptState{1, 4 * base}, windowStats{steals: 10}, adaptState{1, 2 * base}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := adapt(cfg, base, tt.in, tt.win); got != tt.want {
				t.Errorf("adapt = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The controller's effect, end to end, on a fake clock: while every task
// fails, each closed window doubles the retry delay factor, so the delay
// before a retry grows far beyond the base policy and a failing dependency
// is hit less often.
func TestAdaptiveLengthensRetryDelays(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	r := openRDB(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	clk := fakeClock()
	base, window := 200*time.Millisecond, 5*time.Second
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 4, Clock: clk,
		Retry:            backoff.Policy{Initial: base, Max: base, Jitter: -1},
		MaintainInterval: time.Hour,
		Adaptive:         AdaptiveConfig{Interval: window}})
	w.Handle("down", func(context.Context, *Task) error { return errors.New("dependency down") })
	runWorker(t, w)
	clk.BlockUntil(3) // lease keeper, maintainer and controller tickers armed
	// delayOf waits for task id to fail and returns how long after the
	// (unmoving) fake now its retry is due.
	delayOf := func(id string) time.Duration {
		t.Helper()
		var d time.Duration
		testutil.WaitFor(t, 10*time.Second, "task in retry", func() (bool, string) {
			zs, err := r.Client().Do(ctx, r.Client().B().Zrange().Key(rdb.QueueKeys(q)[rdb.KRetry]).Min("0").Max("-1").Withscores().Build()).AsZScores()
			if err != nil {
				t.Fatal(err)
			}
			for _, z := range zs {
				if strings.HasSuffix(z.Member, "\x00"+id) {
					d = time.UnixMilli(int64(z.Score)).Sub(clk.Now())
					return true, ""
				}
			}
			return false, fmt.Sprint(len(zs), " tasks in retry")
		})
		return d
	}
	enqueue := func() string {
		t.Helper()
		info, err := c.Enqueue(ctx, NewTask("down", nil), Queue(q), MaxRetries(1000))
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	d0 := delayOf(enqueue())
	// Each window sees only failures: the factor doubles per window.
	for want := 2.0; want <= 8; want *= 2 {
		before := w.failed.Load()
		for range 5 {
			enqueue()
		}
		testutil.WaitFor(t, 10*time.Second, "5 more failures", func() (bool, string) {
			return w.failed.Load() >= before+5, fmt.Sprint(w.failed.Load()-before, " failures")
		})
		clk.Advance(window)
		testutil.WaitFor(t, 10*time.Second, "the factor to double", func() (bool, string) {
			return w.adaptive.retryScale() == want, fmt.Sprintf("factor %g, want %g", w.adaptive.retryScale(), want)
		})
	}
	d1 := delayOf(enqueue())
	t.Logf("first retry delay: %s before adaptation, %s under a 100%% error rate (factor %g)", d0, d1, w.adaptive.retryScale())
	if d0 != base {
		t.Errorf("delay before adaptation %s, want %s", d0, base)
	}
	if d1 != 8*base {
		t.Errorf("delay under a high error rate %s, want %s (8x the base)", d1, 8*base)
	}
}
