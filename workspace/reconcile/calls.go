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

// recordFailure records a failed provider call: terminal (a permanent
// error, the deadline, retries exhausted) or retried after the backoff.
func (r *Reconciler) recordFailure(ctx context.Context, w *workspace.Workspace, err error, now, deadline time.Time) {
	info, next := r.failureInfo(w, err, now, deadline)
	r.cfg.Logger.Warn("workspace: execute failed", "id", w.ID, "op", w.Operation, "error_count", info.ErrorCount, "reason", info.Reason, "err", err)
	if err := r.store.Failed(ctx, w.ID, w.OpID, info.ErrorCount, info, now, next); err != nil {
		r.cfg.Logger.Warn("workspace: record failure", "id", w.ID, "err", err)
	}
	r.afterFailure(ctx, w, info, now, next)
}

// afterFailure counts a terminal failure and lets the monitor flip it to
// ERROR, or wakes the workspace for its retry.
func (r *Reconciler) afterFailure(ctx context.Context, w *workspace.Workspace, info *workspace.ErrorInfo, now time.Time, next *time.Time) {
	if info.IsTerminal {
		r.cfg.Metrics.opEnded(w.Operation, terminalResult(info), w.OpStartedAt, now)
		r.hints.Publish(ctx, hints.ChanMonitor, w.ID)
	} else {
		r.pokeAt(w.ID, next.Sub(now))
	}
}

// failureInfo is the error info of a failed attempt and, unless terminal,
// when to try again.
func (r *Reconciler) failureInfo(w *workspace.Workspace, err error, now, deadline time.Time) (*workspace.ErrorInfo, *time.Time) {
	count := w.ErrorCount + 1
	var ee *provider.ExitError
	isExit := errors.As(err, &ee)
	if isExit && w.ErrorInfo != nil && w.ErrorInfo.Reason == workspace.ReasonExited && ee.Exit.At.Sub(w.ErrorInfo.ExitedAt) > r.cfg.CrashWindow {
		count = 1 // it ran longer than the crash window since its last end: a new count
	}
	info := &workspace.ErrorInfo{Reason: workspace.FailureReason(err), Operation: w.Operation, ErrorCount: count, LastError: err.Error(), OccurredAt: now.UTC()}
	if isExit {
		info.ExitStatus, info.Output, info.ExitedAt = ee.Exit.Status, ee.Exit.Output, ee.Exit.At.UTC()
	}
	var next *time.Time
	var pe *provider.PermanentError
	switch {
	case errors.As(err, &pe):
		info.Reason, info.IsTerminal = pe.Reason, true
	case errors.Is(err, context.DeadlineExceeded) && !now.Before(deadline):
		info.Reason, info.IsTerminal = workspace.ReasonTimeout, true
		info.Elapsed = now.Sub(opStarted(w)).Seconds()
	case count > r.cfg.MaxRetries:
		info.Reason, info.IsTerminal = workspace.ReasonRetryExceeded, true
	default:
		// Rounded up to the store's millisecond: stored rounded down, the
		// retry could come up to 1 ms before the policy's delay had passed.
		t := ceilMillis(now.Add(r.cfg.retryPolicy().Delay(count - 1)))
		next = &t
	}
	return info, next
}

// uncountedExit is how the workspace's command ended, if it ended at or
// after since (and was not stopped) and that end is not counted in its
// error info yet. A start that follows such an end is a restart after a
// crash, which counts as a failed attempt first.
func (r *Reconciler) uncountedExit(ctx context.Context, w *workspace.Workspace, since time.Time) *provider.Exit {
	er, ok := r.container.(provider.ExitReporter)
	if !ok {
		return nil
	}
	e, err := er.Exited(ctx, w.ID, since)
	if err != nil || e == nil || w.ErrorInfo != nil && !e.At.After(w.ErrorInfo.ExitedAt) {
		return nil // no end, or one already counted
	}
	return e
}

// exitPoll is how soon an executed start is checked again for a command
// that ended (the monitor sees no change: the workspace was not running
// before either), when the container can tell: a second after the start,
// then after as long again as the start has waited so far, at most
// maxExitPoll. A start normally completes at the monitor's next
// observation, milliseconds later; while 100,000 starts wait for theirs,
// a check every second each (each a read) slowed the monitor they wait
// for, and a run on Postgres took 36 s instead of 22.
func (r *Reconciler) exitPoll(w *workspace.Workspace, now time.Time) time.Duration {
	if _, ok := r.container.(provider.ExitReporter); ok && w.Operation == workspace.OpStarting {
		return min(max(time.Second, now.Sub(opStarted(w))), maxExitPoll)
	}
	return time.Duration(1<<63 - 1)
}

// maxExitPoll bounds exitPoll.
const maxExitPoll = 30 * time.Second

// exitedSinceStart records, if w's command ended after its start was
// executed, a failed attempt (reason Exited, with its status and last
// output) and reports true; the start runs again after the backoff.
func (r *Reconciler) exitedSinceStart(ctx context.Context, w *workspace.Workspace, now time.Time) bool {
	if w.ObservedStatus == workspace.Running {
		return false
	}
	e := r.uncountedExit(ctx, w, opStarted(w))
	if e == nil {
		return false
	}
	info, next := r.failureInfo(w, &provider.ExitError{Exit: *e}, now, opStarted(w).Add(r.cfg.Timeouts[w.Operation]))
	r.cfg.Logger.Warn("workspace: command ended while starting", "id", w.ID, "status", e.Status, "error_count", info.ErrorCount, "terminal", info.IsTerminal)
	if err := r.store.Crashed(ctx, w.ID, w.OpID, info.ErrorCount, info, now, next); err != nil {
		r.cfg.Logger.Warn("workspace: record exit", "id", w.ID, "err", err)
		return false
	}
	r.hints.Publish(ctx, hints.ChanWorkspace, w.ID)
	r.afterFailure(ctx, w, info, now, next)
	return true
}

// call is the provider side of each operation.
func (r *Reconciler) call(ctx context.Context, w *workspace.Workspace) error {
	switch w.Operation {
	case workspace.OpProvisioning:
		return r.storage.Provision(ctx, w.ID)
	case workspace.OpRestoring:
		return r.storage.Restore(ctx, w.ID, w.ArchiveKey)
	case workspace.OpStarting:
		if e := r.uncountedExit(ctx, w, time.Time{}); e != nil {
			return &provider.ExitError{Exit: *e} // it was running and its command ended: a failed attempt, then a restart
		}
		return r.container.Start(ctx, provider.Spec{ID: w.ID, Name: w.Name, Owner: w.Owner, Image: w.Image, Command: w.Command,
			VolumeDir: r.storage.VolumePath(w.ID), Env: w.Env, Limits: provider.Limits{CPUs: w.CPUs, Memory: w.Memory, Pids: w.Pids}, HTTP: w.HTTP})
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

// ceilMillis is t's wall clock rounded up to a whole millisecond, the
// precision the store keeps times in: a time stored so is never before t.
func ceilMillis(t time.Time) time.Time {
	t = t.Round(0) // the wall clock alone, as the store will keep it
	c := t.Truncate(time.Millisecond)
	if c.Before(t) {
		c = c.Add(time.Millisecond)
	}
	return c
}
