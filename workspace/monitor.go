package workspace

import (
	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/store"

	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gantryhq/gantry/workspace/provider"
)

// MonitorConfig configures a HealthMonitor. Zero values are the defaults.
type MonitorConfig struct {
	// Interval between full passes (HEALTH_MONITOR_INTERVAL); 0 = 30 s.
	Interval time.Duration
	// Concurrency bounds observations in flight, in a pass and for hints
	// each; 0 = 256, the reconciler's bound on provider calls. Each
	// observation waits on a batched read and a batched write: at 64, a
	// burst of 30,000 hinted workspaces was held to ~1,400 observations/s
	// and the monitor became the queue every operation waited in; 512
	// converged 100,000 no faster than 256 but left twice the goroutines
	// runnable, which a user's request waited behind.
	Concurrency int
	Logger      *slog.Logger
	Clock       clock.Clock // nil = the real clock
	// Metrics counts the operations an observation ends (observationEnds);
	// nil = none.
	Metrics *Metrics
}

// MonitorStore is what the HealthMonitor reads and writes: it is the only
// writer of observed_status and of the ObserveFailed error info.
type MonitorStore interface {
	Get(ctx context.Context, id string) (Workspace, error)
	List(ctx context.Context) ([]Workspace, error)
	SetObserved(ctx context.Context, w Workspace, status Status, now time.Time) (bool, error)
	SetObservedComplete(ctx context.Context, w Workspace, status Status, now time.Time) (bool, error)
	SetObserveError(ctx context.Context, id string, info *ErrorInfo, now time.Time) (bool, error)
	ClearObserveError(ctx context.Context, id string, now time.Time) (bool, error)
}

var _ MonitorStore = (*store.Store)(nil)

// HealthMonitor is the only writer of observed_status. It maps what the
// providers report to a status:
//
//	error_info.is_terminal          → ERROR
//	container running, no volume    → ERROR (invariant broken)
//	container running               → RUNNING
//	volume                          → STANDBY
//	nothing                         → PENDING (archived, or new: PROVISIONING follows)
//
// It observes every workspace each Interval and one workspace at once when
// a hint arrives on ChanMonitor; it publishes ChanWorkspace on each change.
// An observation that shows an executed operation at its target also ends
// the operation, in the same write (observationEnds).
// A failed observation leaves observed_status alone and shows in
// error_info (reason ObserveFailed) until an observation succeeds.
type HealthMonitor struct {
	cfg       MonitorConfig
	store     MonitorStore
	handed    rowHandoff // nil: the store hands no rows (store/handoff.go)
	container provider.Container
	storage   provider.Storage
	hints     Hints

	// hintedAt maps a workspace id to when its last observation on a hint
	// began: a pass skips the rows observed since it listed them (observedSince).
	hintedAt sync.Map
}

// NewHealthMonitor checks cfg and returns a monitor.
func NewHealthMonitor(cfg MonitorConfig, st MonitorStore, c provider.Container, s provider.Storage, h Hints) *HealthMonitor {
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if h == nil {
		h = hints.Drop{}
	}
	hr, _ := st.(rowHandoff)
	return &HealthMonitor{cfg: cfg, store: st, handed: hr, container: c, storage: s, hints: urgentHints{h}}
}

// Observe computes w's status from the providers.
func (m *HealthMonitor) Observe(ctx context.Context, w Workspace) (Status, error) {
	if w.ErrorInfo != nil && w.ErrorInfo.IsTerminal {
		return Error, nil
	}
	cs, err := m.container.Observe(ctx, w.ID)
	if err != nil {
		return "", err
	}
	vol, err := m.storage.VolumeExists(ctx, w.ID)
	if err != nil {
		return "", err
	}
	switch {
	case cs == provider.Running && !vol:
		return Error, nil
	case cs == provider.Running:
		return Running, nil
	case vol:
		return Standby, nil
	}
	return Pending, nil
}

// observeOne observes and writes one workspace. hinted marks w possibly
// stale (a row the reconciler handed, store/handoff.go): then observeOne
// writes only a changed status, whose compare-and-set checks the row's
// operation, and otherwise reports false without writing, for the caller
// to observe the row read instead.
func (m *HealthMonitor) observeOne(ctx context.Context, w Workspace, hinted bool) bool {
	// observed_at is when the observation began: a takeover trusts only
	// observations begun after the dead owner's lease lapsed.
	at := m.cfg.Clock.Now()
	st, err := m.Observe(ctx, w)
	if err != nil {
		if hinted {
			return false
		}
		if ctx.Err() == nil {
			m.observeFailed(ctx, w, err, at)
		}
		return true
	}
	if w.ErrorInfo != nil && w.ErrorInfo.Reason == ReasonObserveFailed {
		if ok, err := m.store.ClearObserveError(ctx, w.ID, at); err == nil && ok {
			m.cfg.Logger.Info("workspace: observing again", "id", w.ID)
			m.hints.Publish(ctx, ChanWorkspace, w.ID)
		}
	}
	// Unchanged: write only to date an observation a takeover waits for
	// (an unexecuted operation whose owner's lease has lapsed).
	if st == w.ObservedStatus && (w.Operation == OpNone || w.OpExecuted || w.OpLeaseUntil == nil || at.Before(*w.OpLeaseUntil)) {
		if !hinted {
			m.startNotUp(ctx, w, st)
		}
		return !hinted
	}
	return m.writeObserved(ctx, w, st, at) || !hinted
}

// startNotUp passes an observation on to the reconciler when it shows an
// executed start not running (st unchanged, so nothing is written and no
// other hint goes out): its command may have ended, and only the
// reconciler, asking the container how (provider.ExitReporter), records
// that as a failed attempt. The provider's report of the end (a process
// that exited, a Pod that changed: provider.ChangeNotifier) hints the
// monitor; without this it reached the reconciler only at its next tick,
// ~10 s later, whenever the command ended after Start had returned: the
// status stayed STANDBY before and after.
func (m *HealthMonitor) startNotUp(ctx context.Context, w Workspace, st Status) {
	if w.Operation != OpStarting || !w.OpExecuted || st == Running {
		return
	}
	if _, ok := m.container.(provider.ExitReporter); ok {
		m.hints.Publish(ctx, ChanWorkspace, w.ID)
	}
}

// writeObserved writes status st observed at at for w and reports whether
// it changed the row. An observation that shows w's executed operation at
// its target ends the operation in the same write (observationEnds), unless
// the row moved since w: then it writes the observation alone and leaves
// the operation to the reconciler.
func (m *HealthMonitor) writeObserved(ctx context.Context, w Workspace, st Status, at time.Time) bool {
	var ended, changed bool
	var err error
	if observationEnds(&w, st) {
		ended, err = m.store.SetObservedComplete(ctx, w, st, at)
		changed = ended
	}
	if err == nil && !ended {
		changed, err = m.store.SetObserved(ctx, w, st, at)
	}
	if err != nil {
		m.cfg.Logger.Warn("workspace: write observed_status", "id", w.ID, "err", err)
		return false
	}
	if !changed {
		return false
	}
	m.cfg.Logger.Debug("workspace: observed", "id", w.ID, "status", st)
	w.ObservedStatus, w.ObservedAt = st, &at
	switch {
	case ended:
		m.cfg.Logger.Info("workspace: operation completed", "id", w.ID, "op", w.Operation)
		m.cfg.Metrics.opEnded(w.Operation, resultOK, w.OpStartedAt, at)
		w = *completed(w)
	case w.ErrorInfo != nil && w.ErrorInfo.Reason == ReasonObserveFailed:
		w.ErrorInfo = nil // SetObserved cleared it
	}
	m.wrote(ctx, w)
	return true
}

// wrote announces the row the monitor just wrote, w: handed to the
// reconciler, which steps on it next, and hinted on ChanWorkspace.
func (m *HealthMonitor) wrote(ctx context.Context, w Workspace) {
	if m.handed != nil {
		m.handed.Hand(store.ToReconciler, w)
	}
	m.hints.Publish(ctx, ChanWorkspace, w.ID)
}

// observeFailed makes a failed observation visible in error_info (reason
// ObserveFailed, the provider's error as last_error) without touching
// observed_status: the status stays what was last seen. It is not
// terminal: an operation in flight still ends by its own timeout (the
// policy), and the next successful observation clears it. It writes only
// when the message changes, so a backend that stays down costs no write
// per pass, and occurred_at keeps the first failure.
func (m *HealthMonitor) observeFailed(ctx context.Context, w Workspace, err error, at time.Time) {
	m.cfg.Logger.Warn("workspace: observe failed", "id", w.ID, "err", err)
	prev := w.ErrorInfo
	if prev != nil && prev.Reason != ReasonObserveFailed {
		return // the reconciler's error info says more; keep it
	}
	if prev != nil && prev.LastError == err.Error() {
		return
	}
	info := &ErrorInfo{Reason: ReasonObserveFailed, Operation: w.Operation, ErrorCount: w.ErrorCount,
		LastError: err.Error(), OccurredAt: at.UTC()}
	if prev != nil {
		info.OccurredAt = prev.OccurredAt
	}
	ok, werr := m.store.SetObserveError(ctx, w.ID, info, at)
	if werr != nil {
		m.cfg.Logger.Warn("workspace: write observe error", "id", w.ID, "err", werr)
		return
	}
	if ok {
		m.hints.Publish(ctx, ChanWorkspace, w.ID)
	}
}

// Pass observes every workspace once.
func (m *HealthMonitor) Pass(ctx context.Context) error {
	listed := m.cfg.Clock.Now()
	all, err := m.store.List(ctx)
	if err != nil {
		return err
	}
	defer m.forgetHinted(listed)
	sem := make(chan struct{}, m.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, w := range all {
		if m.observedSince(w.ID, listed) {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.observeOne(ctx, w, false)
		}()
	}
	wg.Wait()
	return nil
}

// Run passes every Interval and observes hinted workspaces at once, until
// ctx ends; it then waits for observations in progress. A pass runs in its
// own goroutine (oneAtATime), so that hinted workspaces never wait for a
// pass over 100,000 rows to end. ChanMonitorUrgent hints are served by a
// loop of their own, with a share of the slots reserved (urgent.go), so an
// urgent hint never waits while the plain loop waits for a slot.
func (m *HealthMonitor) Run(ctx context.Context) error {
	hinted, cancel := m.hints.Subscribe(ChanMonitor)
	defer cancel()
	urgent, cancelUrgent := m.hints.Subscribe(ChanMonitorUrgent)
	defer cancelUrgent()
	t := m.cfg.Clock.NewTicker(m.cfg.Interval)
	defer t.Stop()
	slots := newLanes(m.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	uctx := store.Urgent(ctx)
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case id := <-urgent:
				if !m.observeHinted(uctx, slots, &wg, id) {
					return
				}
			}
		}
	})
	pass := oneAtATime(&wg, func() {
		if err := m.Pass(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Warn("workspace: monitor pass", "err", err)
		}
	})
	pass()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			pass()
		case id := <-hinted:
			if !m.observeHinted(ctx, slots, &wg, id) {
				return nil
			}
		}
	}
}

// observeHinted observes id in its own goroutine once it has a slot (an
// urgent ctx takes the reserved share too); false if ctx ended first.
func (m *HealthMonitor) observeHinted(ctx context.Context, slots lanes, wg *sync.WaitGroup, id string) bool {
	release := slots.acquire(ctx, store.IsUrgent(ctx))
	if release == nil {
		return false
	}
	wg.Go(func() {
		defer release()
		m.observeID(ctx, id)
	})
	return true
}

// observedSince reports whether an observation of id on a hint began
// after t. A pass skips such a row: that observation started from a newer
// row than the pass's list and wrote what it saw, while the pass's own
// compare-and-set on its older row would fail. While 100,000 workspaces
// converged, the pass at startup trailed the hinted observations, and up
// to 100,000 of its writes failed so, a third of the monitor's writes.
func (m *HealthMonitor) observedSince(id string, t time.Time) bool {
	v, ok := m.hintedAt.Load(id)
	return ok && v.(time.Time).After(t)
}

// forgetHinted drops the hinted observations begun before t: the pass
// that listed at t has seen those workspaces since.
func (m *HealthMonitor) forgetHinted(t time.Time) {
	m.hintedAt.Range(func(id, v any) bool {
		if !v.(time.Time).After(t) {
			m.hintedAt.CompareAndDelete(id, v)
		}
		return true
	})
}

// observeID observes id: from the row the reconciler handed with its hint
// (store/handoff.go), unless urgent or that is not enough, else from the
// row read.
func (m *HealthMonitor) observeID(ctx context.Context, id string) {
	m.hintedAt.Store(id, m.cfg.Clock.Now())
	if m.handed != nil {
		if store.IsUrgent(ctx) {
			m.handed.Drop(store.ToMonitor, id)
		} else if w, ok := m.handed.Take(store.ToMonitor, id); ok && m.observeOne(ctx, w, true) {
			return
		}
	}
	w, err := m.store.Get(ctx, id)
	if err != nil {
		return
	}
	m.observeOne(ctx, w, false)
}
