package reconcile

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
)

// A user's change of desired state takes over from the retries of an
// operation it makes pointless (Superseded): the reconciler gives the
// operation up, with a compare-and-set on what it decided from
// (Store.Abandon), and plans the next one for the new desired state at
// once. An operation whose call runs, or that waits for observation, is
// never given up: it finishes, then the next step plans again.

// phase is where w's operation stands for Superseded. Another replica's
// live lease means its call may be running: calling, whatever the row's
// failures say, until the lease lapses.
func (r *Reconciler) phase(w *workspace.Workspace, now time.Time) workspace.OpPhase {
	switch {
	case w.ErrorInfo != nil && w.ErrorInfo.IsTerminal:
		return workspace.PhaseFailed
	case w.OpOwner != r.cfg.Owner && w.OpLeaseUntil != nil && now.Before(*w.OpLeaseUntil):
		return workspace.PhaseCalling
	case w.OpExecuted:
		return workspace.PhaseExecuted
	case w.ErrorCount > 0:
		return workspace.PhaseRetrying
	}
	return workspace.PhaseCalling
}

// superseded reports whether w's operation in flight is to be given up for
// w's desired state.
func (r *Reconciler) superseded(w *workspace.Workspace, now time.Time) bool {
	committed := w.Operation == workspace.OpArchiving && w.ArchiveKey == provider.ArchiveKey(w.ID, w.OpID)
	return workspace.Superseded(w.Operation, r.phase(w, now), w.ObservedStatus, w.DesiredState, w.ArchiveKey != "", committed)
}

// abandon gives w's operation up (Superseded) and leaves the step to plan
// the next one from the row as abandoned (operation NONE, error count and
// info cleared, as a completion leaves it). If the row moved since w, the
// next step decides again from a fresh read.
func (r *Reconciler) abandon(ctx context.Context, w *workspace.Workspace, now time.Time) stepResult {
	ok, err := r.store.Abandon(ctx, *w, r.cfg.Owner, now)
	switch {
	case err != nil:
		r.cfg.Logger.Warn("workspace: give up operation", "id", w.ID, "op", w.Operation, "err", err)
		return stepResult{}
	case !ok:
		return stepResult{again: true}
	}
	r.cfg.Logger.Info("workspace: operation given up for the desired state", "id", w.ID, "op", w.Operation,
		"desired", w.DesiredState, "error_count", w.ErrorCount)
	if w.ErrorInfo == nil || !w.ErrorInfo.IsTerminal { // a terminal one was counted when it failed
		r.cfg.Metrics.opEnded(w.Operation, resultSuperseded, w.OpStartedAt, now)
	}
	r.hints.Publish(ctx, hints.ChanWorkspace, w.ID) // the row changed: the live page shows it
	return stepResult{again: true, next: workspace.Completed(*w), exact: true}
}
