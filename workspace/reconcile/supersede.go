package reconcile

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
)

// A user's change of desired state takes over from the retries of an
// operation it makes pointless (workspace.Superseded, which Decide asks:
// ActAbandon): the reconciler gives the operation up, with a
// compare-and-set on what it decided from (Store.Abandon), and plans the
// next one for the new desired state at once. An operation whose call
// runs, or that waits for observation, is never given up: it finishes,
// then the next step plans again.

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
