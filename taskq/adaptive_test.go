package taskq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/backoff"
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

// The controller's effect, end to end: while every task fails, the delay
// before a retry grows far beyond the base policy, so a failing dependency
// is hit less often.
func TestAdaptiveLengthensRetryDelays(t *testing.T) {
	addr := testRedis(t)
	c := newClient(t, addr)
	r := openRDB(t, addr)
	q := uniq(t, "q")
	ctx := t.Context()
	base := 200 * time.Millisecond
	w := newTestWorker(t, addr, WorkerConfig{Queues: []QueueSpec{{Name: q}}, Concurrency: 4,
		Retry:    backoff.Policy{Initial: base, Max: base, Jitter: 0.01},
		Adaptive: AdaptiveConfig{Interval: 50 * time.Millisecond}})
	w.Handle("down", func(context.Context, *Task) error { return errors.New("dependency down") })
	runWorker(t, w)
	delayOf := func(id string) time.Duration {
		t.Helper()
		var d time.Duration
		waitFor(t, 10*time.Second, "task in retry", func() bool {
			zs, err := r.Client().Do(ctx, r.Client().B().Zrange().Key(rdb.QueueKeys(q)[rdb.KRetry]).Min("0").Max("-1").Withscores().Build()).AsZScores()
			if err != nil {
				t.Fatal(err)
			}
			for _, z := range zs {
				if strings.HasSuffix(z.Member, "\x00"+id) {
					d = time.Until(time.UnixMilli(int64(z.Score)))
					return true
				}
			}
			return false
		})
		return d
	}
	first, _ := c.Enqueue(ctx, NewTask("down", nil), Queue(q), MaxRetries(1000))
	d0 := delayOf(first.ID)
	// Keep failures coming for a while so the controller sees a high error rate.
	for range 20 {
		c.Enqueue(ctx, NewTask("down", nil), Queue(q), MaxRetries(1000))
		time.Sleep(25 * time.Millisecond) // real time: failures spread over the controller's window
	}
	waitFor(t, 10*time.Second, "retry scale to rise", func() bool { return w.adaptive.retryScale() >= 8 })
	probe, _ := c.Enqueue(ctx, NewTask("down", nil), Queue(q), MaxRetries(1000))
	d1 := delayOf(probe.ID)
	t.Logf("first retry delay: %s before adaptation, %s under a 100%% error rate (scale %.0f)", d0, d1, w.adaptive.retryScale())
	if d0 > 2*base {
		t.Errorf("delay before adaptation %s, want about %s", d0, base)
	}
	if d1 < 4*base {
		t.Errorf("delay under a high error rate %s, want at least %s (4x the base)", d1, 4*base)
	}
}
