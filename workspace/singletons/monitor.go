package singletons

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/internal/par"
	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/handoff"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/urgency"
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
	Metrics Metrics
	// Handoff is the mailbox this process's reconciler shares (package
	// handoff): the monitor takes the row a reconciler's hint announces
	// instead of reading it, and leaves the row it wrote; nil = none.
	Handoff *handoff.Mailbox
	// ObserveTimeout bounds one observation's provider calls; 0 = 30 s.
	// Observations of a workspace run one at a time (serial), so a call
	// that hangs (a Docker daemon or API server that accepted the request
	// and never answers) would otherwise hold every later observation of
	// that workspace: past the bound it is an ObserveFailed like any
	// other provider error, and the next observation tries again.
	ObserveTimeout time.Duration
}

// MonitorStore is what the HealthMonitor reads and writes: it is the only
// writer of observed_status and of the ObserveFailed error info.
type MonitorStore interface {
	Get(ctx context.Context, id string) (workspace.Workspace, error)
	ListStates(ctx context.Context) ([]workspace.Workspace, error) // without specs: a pass observes states alone
	SetObserved(ctx context.Context, w workspace.Workspace, status workspace.Status, now time.Time) (bool, error)
	SetObservedComplete(ctx context.Context, w workspace.Workspace, status workspace.Status, now time.Time) (bool, error)
	SetObserveError(ctx context.Context, id string, info *workspace.ErrorInfo, now time.Time) (bool, error)
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
// a hint arrives on hints.ChanMonitor; it publishes hints.ChanWorkspace on each change.
// An observation that shows an executed operation at its target also ends
// the operation, in the same write, when the reconciler would judge it
// complete (workspace.Decide: observationEnds).
// A failed observation leaves observed_status alone and shows in
// error_info (reason ObserveFailed) until an observation succeeds.
type HealthMonitor struct {
	cfg       MonitorConfig
	store     MonitorStore
	handed    *handoff.Mailbox // cfg.Handoff; nil: no rows handed
	container provider.Container
	storage   provider.Storage
	hints     hints.Bus

	// hintedAt maps a workspace id to when its last observation on a hint
	// began: a pass skips the rows observed since it listed them (observedSince).
	hintedAt sync.Map
	// inFlight holds the workspaces being observed, one observation each at
	// a time (observeSerial).
	inFlight serial
}

// serial lets one observation of a workspace run at a time. Two at once
// could write out of order: one that began while a command still ran saw
// RUNNING; one begun after the command ended saw the STANDBY the row
// already held and wrote nothing; the first then wrote RUNNING, last, and
// the row said RUNNING of an ended command until the next pass, 30 s on.
// An observation asked for while one runs is not dropped: the running one
// observes again, from the row read anew, when it ends.
type serial struct {
	mu    sync.Mutex
	again map[string]bool // id → observe again when the running one ends
}

// enter reports whether the caller may observe id now; if not, the
// observation running marks id to observe again.
func (s *serial) enter(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.again == nil {
		s.again = map[string]bool{}
	}
	if _, running := s.again[id]; running {
		s.again[id] = true
		return false
	}
	s.again[id] = false
	return true
}

// leave ends the caller's observation of id unless another was asked for
// meanwhile: then it reports true and the caller observes again.
func (s *serial) leave(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.again[id] {
		s.again[id] = false
		return true
	}
	delete(s.again, id)
	return false
}

// NewHealthMonitor checks cfg and returns a monitor.
func NewHealthMonitor(cfg MonitorConfig, st MonitorStore, c provider.Container, s provider.Storage, h hints.Bus) *HealthMonitor {
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	cfg.Metrics = metricsOr(cfg.Metrics)
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 256
	}
	if cfg.ObserveTimeout <= 0 {
		cfg.ObserveTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if h == nil {
		h = hints.Drop{}
	}
	return &HealthMonitor{cfg: cfg, store: st, handed: cfg.Handoff, container: c, storage: s, hints: urgency.Hints{Bus: h}}
}

// Observe computes w's status from the providers.
func (m *HealthMonitor) Observe(ctx context.Context, w workspace.Workspace) (workspace.Status, error) {
	if w.ErrorInfo != nil && w.ErrorInfo.IsTerminal {
		return workspace.Error, nil
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
		return workspace.Error, nil
	case cs == provider.Running:
		return workspace.Running, nil
	case vol:
		return workspace.Standby, nil
	}
	return workspace.Pending, nil
}

// observeBounded is Observe within ObserveTimeout; past it the error says so.
func (m *HealthMonitor) observeBounded(ctx context.Context, w workspace.Workspace) (workspace.Status, error) {
	octx, cancel := context.WithTimeout(ctx, m.cfg.ObserveTimeout)
	defer cancel()
	st, err := m.Observe(octx, w)
	if err != nil && ctx.Err() == nil && errors.Is(octx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("the providers did not answer within %s: %w", m.cfg.ObserveTimeout, err)
	}
	return st, err
}

// observeOne observes and writes one workspace. hinted marks w possibly
// stale (a row the reconciler handed, package handoff): then observeOne
// writes only a changed status, whose compare-and-set checks the row's
// operation, and otherwise reports false without writing, for the caller
// to observe the row read instead.
func (m *HealthMonitor) observeOne(ctx context.Context, w workspace.Workspace, hinted bool) bool {
	// observed_at is when the observation began: a takeover trusts only
	// observations begun after the dead owner's lease lapsed.
	at := m.cfg.Clock.Now()
	st, err := m.observeBounded(ctx, w)
	if err != nil {
		if hinted {
			return false
		}
		if ctx.Err() == nil {
			m.observeFailed(ctx, w, err, at)
		}
		return true
	}
	if w.ErrorInfo != nil && w.ErrorInfo.Reason == workspace.ReasonObserveFailed {
		if ok, err := m.store.ClearObserveError(ctx, w.ID, at); err == nil && ok {
			m.cfg.Logger.Info("workspace: observing again", "id", w.ID)
			m.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
		}
	}
	// Unchanged: write only to date an observation a takeover waits for
	// (an unexecuted operation whose owner's lease has lapsed).
	if st == w.ObservedStatus && (w.Operation == workspace.OpNone || w.OpExecuted || w.OpLeaseUntil == nil || at.Before(*w.OpLeaseUntil)) {
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
func (m *HealthMonitor) startNotUp(ctx context.Context, w workspace.Workspace, st workspace.Status) {
	if w.Operation != workspace.OpStarting || !w.OpExecuted || st == workspace.Running {
		return
	}
	if _, ok := m.container.(provider.ExitReporter); ok {
		m.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
	}
}

// writeObserved writes status st observed at at for w and reports whether
// it changed the row. An observation that shows w's executed operation at
// its target ends the operation in the same write (observationEnds), unless
// the row moved since w: then it writes the observation alone and leaves
// the operation to the reconciler.
func (m *HealthMonitor) writeObserved(ctx context.Context, w workspace.Workspace, st workspace.Status, at time.Time) bool {
	var ended, changed bool
	var err error
	if observationEnds(w, st, at) {
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
		m.cfg.Metrics.OpCompleted(w.Operation, w.OpStartedAt, at)
		w = *workspace.Completed(w)
	case w.ErrorInfo != nil && w.ErrorInfo.Reason == workspace.ReasonObserveFailed:
		w.ErrorInfo = nil // SetObserved cleared it
	}
	m.wrote(ctx, w)
	return true
}

// observationEnds reports whether observing st at at ends w's operation in
// the observation's own write (Store.SetObservedComplete): whether the
// reconciler's judgment of the row as observed (workspace.Decide) is the
// completion the observation may write (Decision.ObservationEnds). The
// policy plays no part in that judgment.
func observationEnds(w workspace.Workspace, st workspace.Status, at time.Time) bool {
	w.ObservedStatus = st
	obs := workspace.Observation{ArchiveCommitted: w.Operation == workspace.OpArchiving && w.ArchiveKey == provider.ArchiveKey(w.ID, w.OpID)}
	return workspace.Decide(w, obs, at, workspace.Policy{}).ObservationEnds
}

// wrote announces the row the monitor just wrote, w: handed to the
// reconciler, which steps on it next, and hinted on hints.ChanWorkspace.
func (m *HealthMonitor) wrote(ctx context.Context, w workspace.Workspace) {
	if m.handed != nil {
		m.handed.Hand(handoff.ToReconciler, w)
	}
	m.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
}

// observeFailed makes a failed observation visible in error_info (reason
// ObserveFailed, the provider's error as last_error) without touching
// observed_status: the status stays what was last seen. It is not
// terminal: an operation in flight still ends by its own timeout (the
// policy), and the next successful observation clears it. It writes only
// when the message changes, so a backend that stays down costs no write
// per pass, and occurred_at keeps the first failure.
func (m *HealthMonitor) observeFailed(ctx context.Context, w workspace.Workspace, err error, at time.Time) {
	m.cfg.Logger.Warn("workspace: observe failed", "id", w.ID, "err", err)
	prev := w.ErrorInfo
	if prev != nil && prev.Reason != workspace.ReasonObserveFailed {
		return // the reconciler's error info says more; keep it
	}
	if prev != nil && prev.LastError == err.Error() {
		return
	}
	info := &workspace.ErrorInfo{Reason: workspace.ReasonObserveFailed, Operation: w.Operation, ErrorCount: w.ErrorCount,
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
		m.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
	}
}

// Pass observes every workspace once.
func (m *HealthMonitor) Pass(ctx context.Context) error {
	listed := m.cfg.Clock.Now()
	all, err := m.store.ListStates(ctx)
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
			m.observeSerial(ctx, w.ID, func() { m.observeOne(ctx, w, false) })
		}()
	}
	wg.Wait()
	return nil
}

// Run passes every Interval and observes hinted workspaces at once, until
// ctx ends; it then waits for observations in progress. A pass runs in its
// own goroutine (oneAtATime), so that hinted workspaces never wait for a
// pass over 100,000 rows to end. hints.ChanMonitorUrgent hints are served by a
// loop of their own, with a share of the slots reserved (urgent.go), so an
// urgent hint never waits while the plain loop waits for a slot.
func (m *HealthMonitor) Run(ctx context.Context) error {
	hinted, cancel := m.hints.Subscribe(hints.ChanMonitor)
	defer cancel()
	urgent, cancelUrgent := m.hints.Subscribe(hints.ChanMonitorUrgent)
	defer cancelUrgent()
	t := m.cfg.Clock.NewTicker(m.cfg.Interval)
	defer t.Stop()
	slots := urgency.NewLanes(m.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	uctx := urgency.Mark(ctx)
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
	pass := par.OneAtATime(&wg, func() {
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
func (m *HealthMonitor) observeHinted(ctx context.Context, slots urgency.Lanes, wg *sync.WaitGroup, id string) bool {
	release := slots.Acquire(ctx, urgency.Is(ctx))
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
// (package handoff), unless urgent or that is not enough, else from the
// row read.
func (m *HealthMonitor) observeID(ctx context.Context, id string) {
	m.observeSerial(ctx, id, func() { m.observeHintedRow(ctx, id) })
}

// observeSerial runs observe, the observation of id, unless one is running
// (serial): then that one observes id again, read anew, once it ends.
func (m *HealthMonitor) observeSerial(ctx context.Context, id string, observe func()) {
	if !m.inFlight.enter(id) {
		return
	}
	observe()
	for m.inFlight.leave(id) {
		if w, err := m.store.Get(ctx, id); err == nil {
			m.observeOne(ctx, w, false)
		}
	}
}

// observeHintedRow is observeID's observation.
func (m *HealthMonitor) observeHintedRow(ctx context.Context, id string) {
	m.hintedAt.Store(id, m.cfg.Clock.Now())
	if m.handed != nil {
		if urgency.Is(ctx) {
			m.handed.Drop(handoff.ToMonitor, id)
		} else if w, ok := m.handed.Take(handoff.ToMonitor, id); ok && m.observeOne(ctx, w, true) {
			return
		}
	}
	w, err := m.store.Get(ctx, id)
	if err != nil {
		return
	}
	m.observeOne(ctx, w, false)
}
