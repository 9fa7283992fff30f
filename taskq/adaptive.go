package taskq

import (
	"context"
	"math"
	"time"
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

func (w *Worker) setRetryScale(f float64) {
	w.retryScale.Store(math.Float64bits(f))
	w.m.retryScale.Set(f)
}

func (w *Worker) getRetryScale() float64 { return math.Float64frombits(w.retryScale.Load()) }

func (w *Worker) adaptiveLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.Adaptive.Interval)
	defer t.Stop()
	var lastP, lastF, lastS, lastM int64
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		p, f, s := w.processed.Load(), w.failed.Load(), w.steals.Load()
		w.smu.Lock()
		m := int64(w.stealMisses)
		w.smu.Unlock()
		win := windowStats{processed: p - lastP, failed: f - lastF, steals: s - lastS, misses: m - lastM, at: now}
		if m < lastM {
			win.misses = m
		}
		win.rate = float64(win.processed) / now.Sub(last).Seconds()
		if win.processed > 0 {
			win.errRate = float64(win.failed) / float64(win.processed)
		}
		lastP, lastF, lastS, lastM, last = p, f, s, m, now
		w.window.Store(&win)
		if w.cfg.Adaptive.Disable {
			continue
		}
		st := adapt(w.cfg.Adaptive, w.cfg.StealInterval, adaptState{w.getRetryScale(), time.Duration(w.stealEvery.Load())}, win)
		if st.retryScale != w.getRetryScale() {
			w.log.Info("taskq adaptive: retry delay factor", "factor", st.retryScale, "error_rate", win.errRate)
		}
		w.setRetryScale(st.retryScale)
		w.stealEvery.Store(int64(st.stealEvery))
		if win.rate < w.cfg.Adaptive.LowRate && !w.cfg.DisableSteal {
			w.refreshStealTargets(ctx)
		}
	}
}
