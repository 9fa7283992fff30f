package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
)

// Every method here runs on a step's goroutine (reconciler.go: step).

// failed records the failed attempt d judged (ActFail, or after
// ActCrashed): terminal (a permanent error, the deadline, retries
// exhausted) or retried after the backoff.
func (r *Reconciler) failed(ctx context.Context, w *workspace.Workspace, d workspace.Decision, now time.Time) {
	if err := r.store.Failed(ctx, w.ID, w.OpID, d.Info.ErrorCount, d.Info, now, d.RetryAt); err != nil {
		r.cfg.Logger.Warn("workspace: record failure", "id", w.ID, "err", err)
	}
	r.afterFailure(ctx, w, d, now)
}

// afterFailure counts a terminal failure and lets the monitor flip it to
// ERROR, or wakes the workspace for its retry (d says which).
func (r *Reconciler) afterFailure(ctx context.Context, w *workspace.Workspace, d workspace.Decision, now time.Time) {
	if d.Info.IsTerminal {
		r.cfg.Metrics.opEnded(w.Operation, terminalResult(d.Info), w.OpStartedAt, now)
	}
	r.announce(ctx, w.ID, d, now)
}

// crashed records a failed attempt for w's executed start whose command
// ended before it was observed running (ActCrashed: reason Exited, with
// its status and last output), and reports whether it could; the start
// runs again after the backoff.
func (r *Reconciler) crashed(ctx context.Context, w *workspace.Workspace, d workspace.Decision, now time.Time) bool {
	r.cfg.Logger.Warn("workspace: command ended while starting", "id", w.ID, "status", d.Info.ExitStatus, "error_count", d.Info.ErrorCount,
		"terminal", d.Info.IsTerminal)
	if err := r.store.Crashed(ctx, w.ID, w.OpID, d.Info.ErrorCount, d.Info, now, d.RetryAt); err != nil {
		r.cfg.Logger.Warn("workspace: record exit", "id", w.ID, "err", err)
		return false
	}
	r.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
	r.afterFailure(ctx, w, d, now)
	return true
}

// exited is how id's command ended at or after since (and was not
// stopped), if the container can tell (provider.ExitReporter); nil for
// none, or if it cannot say. Decide judges whether that end is counted.
func (r *Reconciler) exited(ctx context.Context, id string, since time.Time) *workspace.ExitReport {
	er, ok := r.container.(provider.ExitReporter)
	if !ok {
		return nil
	}
	e, err := er.Exited(ctx, id, since)
	if err != nil || e == nil {
		return nil
	}
	return exitReport(e)
}

// exitReport is e as Decide takes it.
func exitReport(e *provider.Exit) *workspace.ExitReport {
	return &workspace.ExitReport{Status: e.Status, Code: e.Code, At: e.At, Output: e.Output, Message: (&provider.ExitError{Exit: *e}).Error()}
}

// callResult is a provider call's error as Decide takes it.
func callResult(err error) workspace.CallResult {
	if err == nil {
		return workspace.CallResult{}
	}
	res := workspace.CallResult{Failed: true, Err: err.Error(), Reason: workspace.FailureReason(err), DeadlineExceeded: errors.Is(err, context.DeadlineExceeded)}
	var pe *provider.PermanentError
	if errors.As(err, &pe) {
		res.Reason, res.Permanent = pe.Reason, true
	}
	var ee *provider.ExitError
	if errors.As(err, &ee) {
		res.Exit = exitReport(&ee.Exit)
	}
	return res
}

// call is the provider side of each operation. exit, for a start, is an
// end of the command not counted yet (Decision.Exit): no Start, the call
// fails with it (a failed attempt, then a restart).
func (r *Reconciler) call(ctx context.Context, w *workspace.Workspace, exit *workspace.ExitReport) error {
	switch w.Operation {
	case workspace.OpProvisioning:
		return r.storage.Provision(ctx, w.ID)
	case workspace.OpRestoring:
		return r.storage.Restore(ctx, w.ID, w.ArchiveKey)
	case workspace.OpStarting:
		if e := exit; e != nil {
			return &provider.ExitError{Exit: provider.Exit{Status: e.Status, Code: e.Code, At: e.At, Output: e.Output}}
		}
		return r.container.Start(ctx, provider.Spec{ID: w.ID, Name: w.Name, Owner: w.Owner, Image: w.Image, Command: w.Command,
			VolumeDir: r.storage.VolumePath(w.ID), Env: w.Env, Limits: provider.Limits{CPUs: w.CPUs, Memory: w.Memory, Pids: w.Pids}, HTTP: w.HTTP,
			Ports: w.AppPorts()})
	case workspace.OpStopping:
		return r.container.Stop(ctx, w.ID)
	case workspace.OpArchiving:
		// Order is the invariant: archive committed, key recorded, then
		// the volume removed. A crash anywhere repeats only what is left:
		// a takeover that finds this op_id's key recorded only removes the
		// volume.
		if key := provider.ArchiveKey(w.ID, w.OpID); w.ArchiveKey != key {
			if err := r.archive(ctx, w); err != nil {
				return err
			}
		}
		return r.storage.DeleteVolume(ctx, w.ID)
	case workspace.OpDeleting:
		if err := r.container.Stop(ctx, w.ID); err != nil {
			return err
		}
		if err := r.storage.DeleteVolume(ctx, w.ID); err != nil {
			return err
		}
		if d, ok := r.container.(provider.Discarder); ok {
			if err := d.Discard(ctx, w.ID); err != nil {
				return err
			}
		}
		if as, ok := r.storage.(provider.ArchiveStore); ok {
			// The archive GC removes its archives once the retention has
			// passed since this moment.
			return as.Tombstone(ctx, w.ID, r.cfg.Clock.Now())
		}
		return nil
	}
	return fmt.Errorf("workspace: unknown operation %q", w.Operation)
}

// archive writes w's archive and records its key. The key is recorded
// even if ctx ends (shutdown) once the archive is committed: otherwise the
// replica taking the operation over would write the archive again.
func (r *Reconciler) archive(ctx context.Context, w *workspace.Workspace) error {
	key, err := r.storage.Archive(ctx, w.ID, w.OpID)
	if err != nil {
		return err
	}
	rec, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.store.SetArchiveKey(rec, w.ID, w.OpID, key, r.cfg.Clock.Now()); err != nil {
		return err
	}
	w.ArchiveKey = key
	return nil
}
