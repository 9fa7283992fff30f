package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/client"
)

// wsCommand is what every workspace runs: nothing, for ever.
const wsCommand = "exec sleep 2147483647"

// sample is one start: create → RUNNING, create → exec `true` returned 0
// (zero when not measured), and whether the warm pool served it.
type sample struct {
	running, exec time.Duration
	pooled        bool
}

// measureStart creates n (desired RUNNING) and times it to RUNNING and,
// with exec, to `true` run in it; the workspace's id is returned (for the
// caller to delete) even when the start failed after the create.
func (s *server) measureStart(ctx context.Context, n workspace.NewWorkspace, exec bool) (sample, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.b.cfg.timeout)
	defer cancel()
	var smp sample
	t0 := time.Now()
	w, err := s.user.Create(ctx, n)
	if err != nil {
		return smp, "", err
	}
	smp.pooled = w.Pooled
	runs := make(chan struct{}) // closed when the workspace is seen RUNNING
	if w.ObservedStatus == workspace.Running && w.Operation == workspace.OpNone {
		smp.running = time.Since(t0)
		close(runs)
	}
	type result struct {
		d   time.Duration
		err error
	}
	execDone := make(chan result, 1)
	if exec {
		go func() {
			d, err := s.execTrue(ctx, w.ID, t0, runs)
			execDone <- result{d, err}
		}()
	}
	if smp.running == 0 {
		smp.running, err = s.waitRunning(ctx, w.ID, t0)
		if err != nil {
			cancel()
		}
		close(runs)
	}
	if exec {
		r := <-execDone
		if err == nil {
			err = r.err
		}
		smp.exec = r.d
	}
	return smp, w.ID, err
}

// waitRunning waits until workspace id is observed RUNNING with no
// operation in flight, as the user's event stream or a Get (every -poll)
// says, whichever first, and returns the time since t0 when it saw that.
// (The event stream alone can lag under load: its hub reads each changed
// row after the change's hint.)
func (s *server) waitRunning(ctx context.Context, id string, t0 time.Time) (time.Duration, error) {
	tick := time.NewTicker(s.b.cfg.poll)
	defer tick.Stop()
	for {
		st, gone, next := s.watch.get(id)
		if gone {
			return 0, fmt.Errorf("workspace %s deleted while starting", id)
		}
		for {
			if st.running() {
				return time.Since(t0), nil
			}
			if st.failed() {
				return 0, fmt.Errorf("workspace %s in ERROR (%s: %s)", id, st.Error.Reason, st.Error.LastError)
			}
			select {
			case <-next:
			case <-tick.C:
				if w, err := s.user.Get(ctx, id); err == nil {
					st = stateOf(w)
					continue
				}
			case <-ctx.Done():
				return 0, fmt.Errorf("workspace %s not RUNNING after %v (last: observed %s, operation %s)", id, s.b.cfg.timeout, st.Observed, st.Op)
			}
			break
		}
	}
}

// stateOf is what an event would say of w.
func stateOf(w workspace.Workspace) wsState {
	st := wsState{Observed: w.ObservedStatus, Desired: w.DesiredState, Op: w.Operation}
	if w.ErrorInfo != nil {
		st.Error = &errorSummary{Reason: w.ErrorInfo.Reason, LastError: w.ErrorInfo.LastError}
	}
	return st
}

// execTrue runs `true` in workspace id until it returns exit status 0:
// at once, then, while the server refuses it as not RUNNING (409), again
// every -exec-retry and as soon as runs closes (the workspace seen
// RUNNING); it returns the time since t0 when `true` returned.
func (s *server) execTrue(ctx context.Context, id string, t0 time.Time, runs <-chan struct{}) (time.Duration, error) {
	eio := client.ExecIO{Stdout: io.Discard, Stderr: io.Discard}
	for {
		status, err := s.user.Exec(ctx, id, []string{"true"}, eio)
		if err == nil && status == 0 {
			return time.Since(t0), nil
		}
		if err == nil {
			return 0, fmt.Errorf("exec true in %s: exit status %d", id, status)
		}
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
			return 0, fmt.Errorf("exec true in %s: %w", id, err)
		}
		select {
		case <-runs:
			runs = nil // tried on it once: from now on every -exec-retry
		case <-time.After(s.b.cfg.execRetry):
		case <-ctx.Done():
			return 0, fmt.Errorf("exec true in %s: still refused after %v: %w", id, s.b.cfg.timeout, err)
		}
	}
}

// remove deletes workspace id and waits until it is gone.
func (s *server) remove(ctx context.Context, id string) error {
	defer s.watch.forget(id)
	if _, err := s.user.Delete(ctx, id); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	return s.waitGone(ctx, s.user, id, s.b.cfg.timeout)
}
