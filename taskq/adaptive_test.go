package taskq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/backoff"
	"github.com/gantryhq/gantry/internal/testutil"
	"github.com/gantryhq/gantry/taskq/internal/rdb"
	"github.com/prometheus/client_golang/prometheus"
	ptestutil "github.com/prometheus/client_golang/prometheus/testutil"
)

func TestAdaptRules(t *testing.T) {
	cfg := AdaptiveConfig{}
	cfg.defaults()
	b := adaptBounds{cfg: cfg, baseSteal: time.Second, baseIdle: time.Second}
	start := knobs{retryScale: 1, idleWait: time.Second, stealEvery: time.Second}
	with := func(f func(*knobs)) knobs { k := start.clone(); f(&k); return k }
	failing := windowStats{processed: 10, failed: 9, errRate: 0.9}
	between := windowStats{processed: 10, failed: 3, errRate: 0.3} // under High, over High/2: hold
	healthy := windowStats{processed: 10, errRate: 0}
	slow := windowStats{processed: 1, rate: 0.2, backlog: map[string]int64{"a": 5, "b": 50}}
	contended := windowStats{steals: 1, misses: 9, rate: 5, backlog: map[string]int64{"a": 30, "b": 10}}
	tests := []struct {
		name    string
		in      knobs
		win     windowStats
		want    knobs
		changed []string
	}{
		{"1+2: high error rate: retry delays x2, poll pause starts", start, failing,
			with(func(k *knobs) { k.retryScale, k.pollDelay = 2, 10*time.Millisecond }), []string{actRetry, actPoll}},
		{"1+2: capped", with(func(k *knobs) { k.retryScale, k.pollDelay = 16, time.Second }), failing,
			with(func(k *knobs) { k.retryScale, k.pollDelay = 16, time.Second }), nil},
		{"1+2: hysteresis: between High/2 and High nothing moves", with(func(k *knobs) { k.retryScale, k.pollDelay = 8, 80*time.Millisecond }), between,
			with(func(k *knobs) { k.retryScale, k.pollDelay = 8, 80*time.Millisecond }), nil},
		{"1+2: recovery halves back", with(func(k *knobs) { k.retryScale, k.pollDelay = 8, 80*time.Millisecond }), healthy,
			with(func(k *knobs) { k.retryScale, k.pollDelay = 4, 40*time.Millisecond }), []string{actRetry, actPoll}},
		{"2: the last halving ends the pause", with(func(k *knobs) { k.pollDelay = 10 * time.Millisecond }), healthy, start, []string{actPoll}},
		{"3+4: low throughput with a backlog: shorter wake-list block, the most backlogged queue weighs x2", start, slow,
			with(func(k *knobs) { k.idleWait, k.boost = 500*time.Millisecond, map[string]float64{"b": 2} }), []string{actIdleWait, actPriority}},
		{"3+4: floor and cap", with(func(k *knobs) { k.idleWait, k.boost = 100*time.Millisecond, map[string]float64{"b": 4} }), slow,
			with(func(k *knobs) { k.idleWait, k.boost = 100*time.Millisecond, map[string]float64{"b": 4} }), nil},
		{"3+4: throughput back: both undo", with(func(k *knobs) { k.idleWait, k.boost = 250*time.Millisecond, map[string]float64{"b": 4} }),
			windowStats{processed: 50, rate: 10, backlog: map[string]int64{"b": 3}},
			with(func(k *knobs) { k.idleWait, k.boost = 500*time.Millisecond, map[string]float64{"b": 2} }), []string{actIdleWait, actPriority}},
		{"5+6: steal contention: slower stealing, weights rebalanced to the backlog", start, contended,
			with(func(k *knobs) { k.stealEvery, k.boost = 2*time.Second, map[string]float64{"a": 1.75, "b": 1.25} }), []string{actStealEvery, actRebalance}},
		{"5: capped at 8x", with(func(k *knobs) { k.stealEvery = 8 * time.Second; k.boost = map[string]float64{"a": 1.75, "b": 1.25} }), contended,
			with(func(k *knobs) { k.stealEvery = 8 * time.Second; k.boost = map[string]float64{"a": 1.75, "b": 1.25} }), nil},
		{"5: hysteresis: a third of attempts missing holds", with(func(k *knobs) { k.stealEvery = 4 * time.Second }), windowStats{steals: 6, misses: 3, rate: 5},
			with(func(k *knobs) { k.stealEvery = 4 * time.Second }), nil},
		{"5: calm speeds back up", with(func(k *knobs) { k.stealEvery = 4 * time.Second }), windowStats{steals: 10, rate: 5},
			with(func(k *knobs) { k.stealEvery = 2 * time.Second }), []string{actStealEvery}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := adapt(b, adaptState{knobs: tt.in}, tt.win)
			if !reflect.DeepEqual(normal(got.state.knobs), normal(tt.want)) || fmt.Sprint(got.changed) != fmt.Sprint(tt.changed) {
				t.Errorf("adapt = %+v changed %v, want %+v changed %v", got.state.knobs, got.changed, tt.want, tt.changed)
			}
		})
	}
}

func normal(k knobs) knobs {
	if len(k.boost) == 0 {
		k.boost = nil
	}
	return k
}

// The watch step: a change whose figure got worse in the next window is
// reverted and its actions held for three windows; one that helped stays.
func TestAdaptRevertsWhatMadeThingsWorse(t *testing.T) {
	cfg := AdaptiveConfig{}
	cfg.defaults()
	b := adaptBounds{cfg: cfg, baseSteal: time.Second, baseIdle: time.Second}
	start := adaptState{knobs: knobs{retryScale: 1, idleWait: time.Second, stealEvery: time.Second}}
	slow := windowStats{processed: 10, rate: 0.5, backlog: map[string]int64{"a": 100}}
	s1 := adapt(b, start, slow)
	if len(s1.changed) != 2 || s1.state.watch == nil || s1.state.watch.items[0].figure != "rate" {
		t.Fatalf("first window: %+v", s1)
	}
	// Throughput fell further after the change: revert, hold.
	s2 := adapt(b, s1.state, windowStats{processed: 2, rate: 0.1, backlog: map[string]int64{"a": 100}})
	if fmt.Sprint(s2.reverted) != fmt.Sprint([]string{actIdleWait, actPriority}) || !reflect.DeepEqual(normal(s2.state.knobs), normal(start.knobs)) {
		t.Fatalf("after a worse window: reverted %v, knobs %+v; want both reverted to %+v", s2.reverted, s2.state.knobs, start.knobs)
	}
	// Held: the same trigger does nothing for the next windows…
	s3 := adapt(b, s2.state, slow)
	if len(s3.changed) != 0 {
		t.Fatalf("a held action acted again: %v", s3.changed)
	}
	s4 := adapt(b, s3.state, slow)
	s5 := adapt(b, s4.state, slow)
	if len(s4.changed) != 0 || len(s5.changed) == 0 {
		t.Fatalf("hold: window 2 changed %v, window 3 changed %v; want the hold to last 3 windows", s4.changed, s5.changed)
	}
	// A change that helped stays.
	kept := adapt(b, s1.state, windowStats{processed: 100, rate: 5, backlog: map[string]int64{"a": 10}})
	if len(kept.reverted) != 0 {
		t.Fatalf("a change that raised throughput was reverted: %+v", kept)
	}
}

// Each action, driven through the controller, moves its gauge; a revert is
// counted.
func TestAdaptiveGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	clk := fakeClock()
	var processed, failed int64
	backlog := map[string]int64{"a": 10, "b": 90}
	st := newStealer(stealerParams{m: m, clock: clk, interval: time.Second})
	a := newAdaptiveController(adaptiveParams{cfg: AdaptiveConfig{Interval: time.Second}, baseSteal: time.Second, baseIdle: time.Second, queues: []string{"a", "b"},
		stealer: st, disableSteal: true, counts: func() (int64, int64) { return processed, failed },
		backlog: func() map[string]int64 { return backlog }, clock: clk, m: m, log: slog.New(slog.DiscardHandler)})
	a.p.cfg.defaults()
	var prev windowTotals
	prev.at = clk.Now()
	window := func(p, f int64) {
		processed, failed = processed+p, failed+f
		clk.Advance(time.Second)
		a.apply(t.Context(), a.closeWindow(&prev))
	}
	gauge := func(name string, labels ...string) float64 {
		t.Helper()
		var g prometheus.Gauge
		switch name {
		case "setting":
			g = m.adaptive.WithLabelValues(labels...)
		case "weight":
			g = m.queueWeight.WithLabelValues(labels...)
		}
		return ptestutil.ToFloat64(g)
	}
	window(10, 9) // high error rate: actions 1 and 2
	if gauge("setting", "retry_scale") != 2 || gauge("setting", "poll_delay_seconds") != 0.01 || a.pollDelay() != 10*time.Millisecond {
		t.Fatalf("after a failing window: retry_scale %v, poll_delay %v", gauge("setting", "retry_scale"), gauge("setting", "poll_delay_seconds"))
	}
	window(10, 0) // healthy, throughput fine with a backlog: 1 and 2 undo
	if gauge("setting", "retry_scale") != 1 || gauge("setting", "poll_delay_seconds") != 0 {
		t.Fatalf("after a healthy window: retry_scale %v, poll_delay %v", gauge("setting", "retry_scale"), gauge("setting", "poll_delay_seconds"))
	}
	window(0, 0) // no throughput with a backlog: actions 3 and 4
	if gauge("setting", "idle_wait_seconds") != 0.5 || gauge("weight", "b") != 2 || gauge("weight", "a") != 1 || a.weight("b") != 2 {
		t.Fatalf("after a slow window: idle_wait %v, weight b %v", gauge("setting", "idle_wait_seconds"), gauge("weight", "b"))
	}
	st.steals.Store(1)
	for range 9 {
		st.noteMiss()
	}
	window(10, 0) // contention: 5 and 6 (and throughput back: 3 and 4 undo)
	if gauge("setting", "steal_interval_seconds") != 2 || time.Duration(st.every.Load()) != 2*time.Second || gauge("weight", "b") != 1.9 || gauge("weight", "a") != 1.1 {
		t.Fatalf("after a contended window: steal_interval %v, weights a %v b %v", gauge("setting", "steal_interval_seconds"), gauge("weight", "a"), gauge("weight", "b"))
	}
	// Contention got worse after the change: reverted and counted.
	for range 20 {
		st.noteMiss()
	}
	window(10, 0)
	if got := ptestutil.ToFloat64(m.adaptChanges.WithLabelValues(actStealEvery, "revert")); got != 1 || gauge("setting", "steal_interval_seconds") != 1 {
		t.Fatalf("after a worse window: reverts %v, steal_interval %v", got, gauge("setting", "steal_interval_seconds"))
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
		Adaptive:         AdaptiveConfig{Interval: window, MaxPollDelay: -1}}) // the poll pause would wait on the unmoving fake clock
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
