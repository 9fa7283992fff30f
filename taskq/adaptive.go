package taskq

import (
	"context"
	"maps"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
)

// AdaptiveConfig tunes the adaptive controller (seed §7.3). Every Interval
// it closes a window (throughput, error rate, steal attempts and misses, the
// backlog of the worker's queues) and applies the seed's six actions, each
// behind a trigger with hysteresis (it acts at the threshold and undoes only
// well below it, so the knobs do not flap):
//
//  1. high error rate (≥ HighErrorRate): retry delays ×2 (up to MaxRetryScale);
//  2. high error rate: poll less often — a pause before each dequeue, 10 ms
//     doubling up to MaxPollDelay;
//     both undo (halve) once the error rate is below half the threshold;
//  3. low throughput (< LowRate tasks/s) with a backlog: poll intervals
//     shorten — the longest block on the wake lists halves (down to 100 ms);
//  4. low throughput with a backlog: queue priorities move to the work — the
//     assigned queue with the largest backlog gets its weight ×2 (up to 4×);
//     3 and 4 undo once throughput is at least twice LowRate;
//  5. high steal contention (half the steal attempts found nothing): the
//     steal refresh interval ×2 (up to 8×);
//  6. high steal contention: queue weights are rebalanced towards the
//     worker's own backlog (each assigned queue's factor 1 + its share of
//     the backlog); 5 and 6 undo once misses are under a quarter.
//
// Then it watches: the next window's figure that a change aimed at (error
// rate for 1 and 2, throughput for 3 and 4, the miss ratio for 5 and 6) must
// not be worse by more than 10%; if it is, the change is reverted and that
// action is held for 3 windows. Every knob is a gauge
// (taskq_adaptive_setting{setting}, taskq_adaptive_queue_weight{queue}), every
// change and revert a log line and taskq_adaptive_changes_total{action,kind}.
type AdaptiveConfig struct {
	Interval      time.Duration // default 5s
	HighErrorRate float64       // default 0.5
	MaxRetryScale float64       // default 16
	MaxPollDelay  time.Duration // default 1s; negative: never slow polling down (action 2 off)
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
	if c.MaxPollDelay == 0 {
		c.MaxPollDelay = time.Second
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
	backlog           map[string]int64 // pending per assigned queue, as last measured
	at                time.Time        // end of the window; zero before the first one
}

func (w windowStats) missRatio() float64 {
	if a := w.steals + w.misses; a > 0 {
		return float64(w.misses) / float64(a)
	}
	return 0
}

func (w windowStats) totalBacklog() (n int64) {
	for _, b := range w.backlog {
		n += b
	}
	return n
}

// The six actions, by the figure each aims at.
const (
	actRetry      = "retry_delay"    // 1: error rate
	actPoll       = "poll_delay"     // 2: error rate
	actIdleWait   = "poll_interval"  // 3: throughput
	actPriority   = "queue_priority" // 4: throughput
	actStealEvery = "steal_interval" // 5: miss ratio
	actRebalance  = "queue_rebalance"
)

// knobs are what the controller sets.
type knobs struct {
	retryScale float64
	pollDelay  time.Duration
	idleWait   time.Duration
	stealEvery time.Duration
	boost      map[string]float64 // weight factor per assigned queue; absent = 1
}

func (k knobs) clone() knobs {
	k.boost = maps.Clone(k.boost)
	return k
}

// adaptState is the controller's state; adapt is pure so it is tested alone.
type adaptState struct {
	knobs
	// watch is what the last window changed: the knobs before, the action,
	// and the figure it aimed at when it acted.
	watch *watch
	hold  map[string]int // windows left during which an action is held after a revert
}

type watch struct {
	before knobs
	items  []watchItem
}

// watchItem is one action of the last window and the figure it aimed at,
// as it was when the action was taken.
type watchItem struct {
	action string
	figure string // "error", "rate" or "miss"
	value  float64
}

// adaptBounds are the floors and ceilings the knobs move between.
type adaptBounds struct {
	cfg       AdaptiveConfig
	baseSteal time.Duration
	baseIdle  time.Duration
}

// adaptStep is one window's outcome: the next state and what happened.
type adaptStep struct {
	state    adaptState
	changed  []string // actions applied (or undone) this window
	reverted []string // actions whose previous change made things worse
}

// adapt computes the next state from the window: first the watch (revert
// a change that made its figure worse), then the triggers.
func adapt(b adaptBounds, s adaptState, win windowStats) adaptStep {
	out := adaptStep{state: adaptState{knobs: s.clone(), hold: map[string]int{}}}
	for a, n := range s.hold {
		if n > 1 {
			out.state.hold[a] = n - 1
		}
	}
	k := &out.state.knobs
	out.reverted = revertWorse(k, s.watch, out.state.hold, win)
	before := k.clone()
	tr := triggersOf(b.cfg, win)
	for _, a := range []struct {
		name string
		f    func(*knobs, adaptBounds, triggers, windowStats) bool
	}{
		{actRetry, actOnRetry}, {actPoll, actOnPoll}, {actIdleWait, actOnIdleWait},
		{actPriority, actOnPriority}, {actStealEvery, actOnStealEvery}, {actRebalance, actOnRebalance},
	} {
		if out.state.hold[a.name] == 0 && a.f(k, b, tr, win) {
			out.changed = append(out.changed, a.name)
		}
	}
	if len(out.changed) > 0 {
		w := &watch{before: before}
		for _, a := range out.changed {
			w.items = append(w.items, watchItem{action: a, figure: aimOf(a), value: figureOf(aimOf(a), win)})
		}
		out.state.watch = w
	}
	return out
}

// revertWorse restores the knob of every watched action whose figure got
// worse and holds that action; it returns the reverted actions.
func revertWorse(k *knobs, w *watch, hold map[string]int, win windowStats) []string {
	if w == nil {
		return nil
	}
	var out []string
	for _, it := range w.items {
		if worse(it.figure, it.value, figureOf(it.figure, win)) {
			restore(k, w.before, it.action)
			hold[it.action] = 3
			out = append(out, it.action)
		}
	}
	return out
}

// triggers are the window's conditions, each with its release (hysteresis:
// between the two, a knob stays where it is).
type triggers struct {
	errHigh, errLow bool // 1, 2: the error rate at the threshold, under half of it
	slow, fast      bool // 3, 4: throughput under LowRate with a backlog, at twice LowRate (or no backlog)
	contended, calm bool // 5, 6: half the steal attempts missed, under a quarter did
}

func triggersOf(cfg AdaptiveConfig, win windowStats) triggers {
	attempts := win.steals + win.misses
	return triggers{
		errHigh:   win.processed > 0 && win.errRate >= cfg.HighErrorRate,
		errLow:    win.processed == 0 || win.errRate < cfg.HighErrorRate/2,
		slow:      win.totalBacklog() > 0 && win.rate < cfg.LowRate,
		fast:      win.rate >= 2*cfg.LowRate || win.totalBacklog() == 0,
		contended: attempts >= 4 && win.missRatio() >= 0.5,
		calm:      attempts < 4 || win.missRatio() < 0.25,
	}
}

// Action 1: retry delays.
func actOnRetry(k *knobs, b adaptBounds, t triggers, _ windowStats) bool {
	return setF(&k.retryScale, pick(t.errHigh, t.errLow, math.Min(k.retryScale*2, b.cfg.MaxRetryScale), math.Max(k.retryScale/2, 1), k.retryScale))
}

// Action 2: the pause before each dequeue (poll frequency).
func actOnPoll(k *knobs, b adaptBounds, t triggers, _ windowStats) bool {
	if b.cfg.MaxPollDelay < 0 {
		return false
	}
	up := min(max(2*k.pollDelay, 10*time.Millisecond), b.cfg.MaxPollDelay)
	down := k.pollDelay / 2
	if down < 10*time.Millisecond {
		down = 0
	}
	return setD(&k.pollDelay, pick(t.errHigh, t.errLow, up, down, k.pollDelay))
}

// Action 3: the longest block on the wake lists (poll interval).
func actOnIdleWait(k *knobs, b adaptBounds, t triggers, _ windowStats) bool {
	return setD(&k.idleWait, pick(t.slow, t.fast, max(k.idleWait/2, 100*time.Millisecond), min(2*k.idleWait, b.baseIdle), k.idleWait))
}

// Action 4: queue priorities follow the backlog while throughput is low.
func actOnPriority(k *knobs, _ adaptBounds, t triggers, win windowStats) bool {
	switch {
	case t.slow:
		return boostLargest(k, win.backlog)
	case t.fast && !t.contended: // under contention, action 6 owns the weights
		return decayBoosts(k)
	}
	return false
}

// Action 5: the steal refresh interval.
func actOnStealEvery(k *knobs, b adaptBounds, t triggers, _ windowStats) bool {
	return setD(&k.stealEvery, pick(t.contended, t.calm, min(2*k.stealEvery, 8*b.baseSteal), max(k.stealEvery/2, b.baseSteal), k.stealEvery))
}

// Action 6: under contention, weights rebalanced towards the own backlog.
func actOnRebalance(k *knobs, _ adaptBounds, t triggers, win windowStats) bool {
	return t.contended && rebalance(k, win.backlog)
}

// restore puts back, from before, the knob that action moves.
func restore(k *knobs, before knobs, action string) {
	switch action {
	case actRetry:
		k.retryScale = before.retryScale
	case actPoll:
		k.pollDelay = before.pollDelay
	case actIdleWait:
		k.idleWait = before.idleWait
	case actStealEvery:
		k.stealEvery = before.stealEvery
	case actPriority, actRebalance:
		k.boost = maps.Clone(before.boost)
	}
}

// pick is up if the trigger holds, down if its opposite does, else keep.
func pick[T any](trigger, release bool, up, down, keep T) T {
	switch {
	case trigger:
		return up
	case release:
		return down
	}
	return keep
}

func setF(p *float64, v float64) bool             { c := *p != v; *p = v; return c }
func setD(p *time.Duration, v time.Duration) bool { c := *p != v; *p = v; return c }

// boostLargest doubles (up to 4×) the weight factor of the assigned queue
// with the largest backlog.
func boostLargest(k *knobs, backlog map[string]int64) bool {
	best, most := "", int64(0)
	for _, q := range sortedKeys(backlog) {
		if backlog[q] > most {
			best, most = q, backlog[q]
		}
	}
	if best == "" {
		return false
	}
	f := math.Min(boostOf(k, best)*2, 4)
	if f == boostOf(k, best) {
		return false
	}
	if k.boost == nil {
		k.boost = map[string]float64{}
	}
	k.boost[best] = f
	return true
}

// decayBoosts halves every factor towards 1.
func decayBoosts(k *knobs) bool {
	changed := false
	for q, f := range k.boost {
		if f2 := math.Max(f/2, 1); f2 != f {
			k.boost[q], changed = f2, true
		}
		if k.boost[q] == 1 {
			delete(k.boost, q)
		}
	}
	return changed
}

// rebalance sets each assigned queue's factor to 1 + its share of the
// worker's backlog (a queue with all of it: 2×).
func rebalance(k *knobs, backlog map[string]int64) bool {
	var total int64
	for _, n := range backlog {
		total += n
	}
	if total == 0 {
		return false
	}
	next := map[string]float64{}
	for q, n := range backlog {
		if n > 0 {
			next[q] = math.Round((1+float64(n)/float64(total))*100) / 100
		}
	}
	if maps.Equal(next, k.boost) {
		return false
	}
	k.boost = next
	return true
}

func boostOf(k *knobs, q string) float64 {
	if f, ok := k.boost[q]; ok {
		return f
	}
	return 1
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// aimOf is the figure an action aims at.
func aimOf(action string) string {
	switch action {
	case actRetry, actPoll:
		return "error"
	case actIdleWait, actPriority:
		return "rate"
	}
	return "miss"
}

func figureOf(figure string, w windowStats) float64 {
	switch figure {
	case "error":
		return w.errRate
	case "rate":
		return w.rate
	}
	return w.missRatio()
}

// worse reports whether a figure moved the wrong way by more than 10%
// (error rate and miss ratio up, throughput down).
func worse(figure string, before, after float64) bool {
	if figure == "rate" {
		return after < before*0.9
	}
	return after > before*1.1 && after-before > 0.05
}

// adaptiveParams configure the adaptive controller.
type adaptiveParams struct {
	cfg          AdaptiveConfig
	baseSteal    time.Duration // StealInterval: the floor of the steal refresh interval
	baseIdle     time.Duration // IdleWait: the ceiling of the wake-list block
	queues       []string      // the assigned queues (their weight gauges)
	stealer      *stealer
	disableSteal bool
	// counts reads the worker's processed and failed totals; backlog the
	// pending count of each assigned queue as last measured.
	counts  func() (processed, failed int64)
	backlog func() map[string]int64
	clock   clock.Clock
	m       *metrics
	log     logger
}

// adaptiveController is seed §7.3's adaptive configuration: every Interval
// it closes a window of figures, publishes it for the worker record, and
// applies adapt's knobs, which the fetcher, the stealer and the processors
// read.
type adaptiveController struct {
	p adaptiveParams
	loop

	// scale holds the float64 bits of the retry delay factor (≥ 1), poll
	// the pause before a dequeue and idle the longest wake-list block (ns):
	// run Stores, the fetcher and processors Load (any goroutine).
	scale, poll, idle atomic.Uint64
	// weights is the weight factor per assigned queue; run Stores a fresh
	// map, the fetcher Loads (never written after the Store).
	weights atomic.Pointer[map[string]float64]
	// window is the last closed window, published whole by run.
	window atomic.Pointer[windowStats]
	// state is run's own (one goroutine).
	state adaptState
	// history holds the last windows (up to trendWindows), oldest first;
	// run appends, trend reads (under histMu).
	histMu  sync.Mutex
	history []windowStats
}

// trendWindows is how many windows the trend averages.
const trendWindows = 12

// trend is the number of windows in the history and their average rate
// and error rate (the health check's baseline).
func (a *adaptiveController) trend() (n int, rate, errRate float64) {
	a.histMu.Lock()
	defer a.histMu.Unlock()
	var processed, failed int64
	for _, w := range a.history {
		rate += w.rate
		processed += w.processed
		failed += w.failed
	}
	if n = len(a.history); n > 0 {
		rate /= float64(n)
	}
	if processed > 0 {
		errRate = float64(failed) / float64(processed)
	}
	return n, rate, errRate
}

func newAdaptiveController(p adaptiveParams) *adaptiveController {
	a := &adaptiveController{p: p}
	a.state.knobs = knobs{retryScale: 1, idleWait: p.baseIdle, stealEvery: p.baseSteal}
	a.publish(a.state.knobs)
	a.window.Store(&windowStats{})
	return a
}

// start runs the adaptive controller until stop or until ctx ends.
func (a *adaptiveController) start(ctx context.Context) { a.launch(ctx, a.run) }

// publish makes k the knobs in force and sets their gauges.
func (a *adaptiveController) publish(k knobs) {
	a.scale.Store(math.Float64bits(k.retryScale))
	a.poll.Store(uint64(k.pollDelay))
	a.idle.Store(uint64(k.idleWait))
	if a.p.stealer != nil {
		a.p.stealer.every.Store(int64(k.stealEvery))
	}
	w := maps.Clone(k.boost)
	a.weights.Store(&w)
	m := a.p.m
	m.retryScale.Set(k.retryScale)
	m.adaptive.WithLabelValues("retry_scale").Set(k.retryScale)
	m.adaptive.WithLabelValues("poll_delay_seconds").Set(k.pollDelay.Seconds())
	m.adaptive.WithLabelValues("idle_wait_seconds").Set(k.idleWait.Seconds())
	m.adaptive.WithLabelValues("steal_interval_seconds").Set(k.stealEvery.Seconds())
	for _, q := range a.p.queues {
		m.queueWeight.WithLabelValues(q).Set(boostOf(&k, q))
	}
}

// retryScale is the factor applied to retry delays now.
func (a *adaptiveController) retryScale() float64 { return math.Float64frombits(a.scale.Load()) }

// pollDelay is the pause before each dequeue now (0: none).
func (a *adaptiveController) pollDelay() time.Duration { return time.Duration(a.poll.Load()) }

// idleWait is the longest block on the wake lists now.
func (a *adaptiveController) idleWait() time.Duration { return time.Duration(a.idle.Load()) }

// weight is queue q's weight factor now.
func (a *adaptiveController) weight(q string) float64 {
	if f, ok := (*a.weights.Load())[q]; ok {
		return f
	}
	return 1
}

// last is the last closed window.
func (a *adaptiveController) last() *windowStats { return a.window.Load() }

func (a *adaptiveController) run(ctx context.Context) {
	var prev windowTotals
	prev.at = a.p.clock.Now()
	tickLoop(ctx, a.p.clock, a.p.cfg.Interval, func() bool {
		win := a.closeWindow(&prev)
		if !a.p.cfg.Disable {
			a.apply(ctx, win)
		}
		return true
	})
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
	var s, m int64
	if a.p.stealer != nil {
		s, m = a.p.stealer.steals.Load(), a.p.stealer.missCount()
	}
	win := windowStats{processed: p - prev.processed, failed: f - prev.failed, steals: s - prev.steals, misses: m - prev.misses,
		backlog: a.p.backlog(), at: now}
	if m < prev.misses { // a steal reset the miss count
		win.misses = m
	}
	win.rate = float64(win.processed) / now.Sub(prev.at).Seconds()
	if win.processed > 0 {
		win.errRate = float64(win.failed) / float64(win.processed)
	}
	*prev = windowTotals{p, f, s, m, now}
	a.window.Store(&win)
	a.histMu.Lock()
	a.history = append(a.history, win)
	if len(a.history) > trendWindows {
		a.history = a.history[1:]
	}
	a.histMu.Unlock()
	return win
}

// apply runs adapt on win and puts its knobs in force.
func (a *adaptiveController) apply(ctx context.Context, win windowStats) {
	step := adapt(adaptBounds{cfg: a.p.cfg, baseSteal: a.p.baseSteal, baseIdle: a.p.baseIdle}, a.state, win)
	a.state = step.state
	k := step.state.knobs
	for _, act := range step.reverted {
		a.p.m.adaptChanges.WithLabelValues(act, "revert").Inc()
		a.p.log.Info("taskq adaptive: reverted a change that made things worse", "action", act,
			"error_rate", win.errRate, "rate", win.rate, "miss_ratio", win.missRatio())
	}
	for _, act := range step.changed {
		a.p.m.adaptChanges.WithLabelValues(act, "change").Inc()
		a.p.log.Info("taskq adaptive: "+act, "retry_scale", k.retryScale, "poll_delay", k.pollDelay, "idle_wait", k.idleWait,
			"steal_interval", k.stealEvery, "weights", k.boost, "error_rate", win.errRate, "rate", win.rate, "miss_ratio", win.missRatio())
	}
	a.publish(k)
	if win.rate < a.p.cfg.LowRate && !a.p.disableSteal && a.p.stealer != nil {
		a.p.stealer.refresh(ctx)
	}
}
