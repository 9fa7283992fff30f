package taskq

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
)

// AdaptiveConfig tunes the adaptive controller (seed §7.3). Every Interval
// it looks at the last window and:
//   - high error rate (≥ HighErrorRate): doubles the retry delay factor (up
//     to MaxRetryScale), so a failing dependency is not hammered; when the
//     rate falls back, the factor halves towards 1;
//   - high steal contention (steal attempts that found nothing ≥ half of the
//     steal attempts): doubles the steal refresh interval (up to 8x), and
//     halves it back when contention is gone;
//   - low throughput with a backlog (pending work, rate below LowRate):
//     refreshes the steal targets at once, so idle capacity finds work.
type AdaptiveConfig struct {
	Interval      time.Duration // default 5s
	HighErrorRate float64       // default 0.5
	MaxRetryScale float64       // default 16
	LowRate       float64       // tasks/s; default 1
	Disable       bool
}

func (c *AdaptiveConfig) defaults() {
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
	}
	if c.HighErrorRate <= 0 {
		c.HighErrorRate = 0.5
	}
	if c.MaxRetryScale < 1 {
		c.MaxRetryScale = 16
	}
	if c.LowRate <= 0 {
		c.LowRate = 1
	}
}

// windowStats are the figures of the last controller window.
type windowStats struct {
	processed, failed int64
	steals, misses    int64
	rate, errRate     float64
	at                time.Time // end of the window; zero before the first one
}

// adaptState is the controller's output; pure so it can be tested alone.
type adaptState struct {
	retryScale float64
	stealEvery time.Duration
}

// adapt computes the next state from the window.
func adapt(cfg AdaptiveConfig, base time.Duration, s adaptState, win windowStats) adaptState {
	if win.processed > 0 && win.errRate >= cfg.HighErrorRate {
		s.retryScale = math.Min(s.retryScale*2, cfg.MaxRetryScale)
	} else {
		s.retryScale = math.Max(s.retryScale/2, 1)
	}
	if attempts := win.steals + win.misses; attempts >= 4 && win.misses*2 >= attempts {
		s.stealEvery = min(s.stealEvery*2, 8*base)
	} else {
		s.stealEvery = max(s.stealEvery/2, base)
	}
	return s
}

// adaptiveParams configure the adaptive controller.
type adaptiveParams struct {
	cfg          AdaptiveConfig
	baseSteal    time.Duration // StealInterval: the floor of the steal refresh interval
	stealer      *stealer
	disableSteal bool
	// counts reads the worker's processed and failed totals.
	counts func() (processed, failed int64)
	clock  clock.Clock
	m      *metrics
	log    logger
}

// adaptiveController is seed §7.3's adaptive configuration: every
// Interval it closes a window of figures (rate, error rate, steals,
// misses), publishes it for the worker record, and applies adapt: the retry
// delay factor, the steal refresh interval, an immediate steal refresh when
// throughput is low.
type adaptiveController struct {
	p adaptiveParams
	loop

	// scale holds the float64 bits of the retry delay factor (≥ 1): run
	// Stores, processors Load on a failure (any goroutine; a stale factor
	// only shifts one retry).
	scale atomic.Uint64
	// window is the last closed window, published whole by run (the
	// pointer's Store orders the fields' writes before any Load).
	window atomic.Pointer[windowStats]
}

func newAdaptiveController(p adaptiveParams) *adaptiveController {
	a := &adaptiveController{p: p}
	a.setRetryScale(1)
	a.window.Store(&windowStats{})
	return a
}

// start runs the adaptive controller until stop or until ctx ends.
func (a *adaptiveController) start(ctx context.Context) { a.launch(ctx, a.run) }

func (a *adaptiveController) setRetryScale(f float64) {
	a.scale.Store(math.Float64bits(f))
	a.p.m.retryScale.Set(f)
}

// retryScale is the factor applied to retry delays now.
func (a *adaptiveController) retryScale() float64 { return math.Float64frombits(a.scale.Load()) }

// last is the last closed window.
func (a *adaptiveController) last() *windowStats { return a.window.Load() }

func (a *adaptiveController) run(ctx context.Context) {
	t := a.p.clock.NewTicker(a.p.cfg.Interval)
	defer t.Stop()
	var prev windowTotals
	prev.at = a.p.clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		win := a.closeWindow(&prev)
		if a.p.cfg.Disable {
			continue
		}
		a.apply(ctx, win)
	}
}

// windowTotals are the running totals at the start of a window.
type windowTotals struct {
	processed, failed, steals, misses int64
	at                                time.Time
}

// closeWindow computes the window since prev, publishes it and makes now
// the start of the next one.
func (a *adaptiveController) closeWindow(prev *windowTotals) windowStats {
	now := a.p.clock.Now()
	p, f := a.p.counts()
	s, m := a.p.stealer.steals.Load(), a.p.stealer.missCount()
	win := windowStats{processed: p - prev.processed, failed: f - prev.failed, steals: s - prev.steals, misses: m - prev.misses, at: now}
	if m < prev.misses { // a steal reset the miss count
		win.misses = m
	}
	win.rate = float64(win.processed) / now.Sub(prev.at).Seconds()
	if win.processed > 0 {
		win.errRate = float64(win.failed) / float64(win.processed)
	}
	*prev = windowTotals{p, f, s, m, now}
	a.window.Store(&win)
	return win
}

// apply adapts the retry factor and the steal interval to win.
func (a *adaptiveController) apply(ctx context.Context, win windowStats) {
	st := adapt(a.p.cfg, a.p.baseSteal, adaptState{a.retryScale(), time.Duration(a.p.stealer.every.Load())}, win)
	if st.retryScale != a.retryScale() {
		a.p.log.Info("taskq adaptive: retry delay factor", "factor", st.retryScale, "error_rate", win.errRate)
	}
	a.setRetryScale(st.retryScale)
	a.p.stealer.every.Store(int64(st.stealEvery))
	if win.rate < a.p.cfg.LowRate && !a.p.disableSteal {
		a.p.stealer.refresh(ctx)
	}
}
