package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/store"
)

// SetDesired writes desired_state. A workspace being deleted is a conflict.
func (s *Store) SetDesired(ctx context.Context, id string, desired workspace.Status, now time.Time) (workspace.Workspace, error) {
	s.mu.Lock()
	r, err := s.lookupLocked(id)
	if err == nil && r.w.DesiredState == workspace.Deleted {
		err = fmt.Errorf("%w: workspace %s is being deleted", workspace.ErrConflict, r.w.ID)
	}
	if err != nil {
		s.mu.Unlock()
		return workspace.Workspace{}, err
	}
	r.w.DesiredState, r.w.UpdatedAt = desired, ms(now)
	r.version++
	r.lastActivity = msPtr(now)
	w := snapshot(r)
	s.mu.Unlock()
	return w, nil
}

// MarkDeleted sets desired_state DELETED.
func (s *Store) MarkDeleted(_ context.Context, id string, now time.Time) error {
	if !s.with(id, func(r *row) bool { r.w.DesiredState, r.w.UpdatedAt = workspace.Deleted, ms(now); return true }) {
		return fmt.Errorf("%w: %q", workspace.ErrNotFound, id)
	}
	return nil
}

// Claim is the seed's CAS (store.Store.Claim's conditions).
func (s *Store) Claim(_ context.Context, w workspace.Workspace, op workspace.Operation, opID, owner string, now, leaseUntil time.Time) (bool, error) {
	return s.with(w.ID, func(r *row) bool {
		if r.w.Operation != workspace.OpNone || !seen(r, w) || r.w.OpID != w.OpID {
			return false
		}
		startOp(&r.w, op, opID, owner, now, leaseUntil)
		return true
	}), nil
}

// Acquire lets owner (re)execute opID that has not executed yet.
func (s *Store) Acquire(_ context.Context, id, opID string, errorCount int, owner string, now, leaseUntil time.Time) (bool, error) {
	return s.with(id, func(r *row) bool {
		c := &r.w
		if c.OpID != opID || c.Operation == workspace.OpNone || c.OpExecuted || c.ErrorCount != errorCount {
			return false
		}
		if !leaseFree(c, owner, now) {
			return false
		}
		c.OpOwner, c.OpLeaseUntil, c.UpdatedAt = owner, msPtr(leaseUntil), ms(now)
		return true
	}), nil
}

// leaseFree reports whether no other owner's call may be running on c: owner
// holds its lease, or it lapsed (store.leaseFree).
func leaseFree(c *workspace.Workspace, owner string, now time.Time) bool {
	return c.OpOwner == owner || c.OpLeaseUntil == nil || c.OpLeaseUntil.Before(ms(now))
}

// Renew extends owner's lease on opID.
func (s *Store) Renew(_ context.Context, id, opID, owner string, leaseUntil time.Time) (bool, error) {
	return s.with(id, func(r *row) bool {
		c := &r.w
		if c.OpID != opID || c.OpOwner != owner || c.Operation == workspace.OpNone {
			return false
		}
		c.OpLeaseUntil = msPtr(leaseUntil)
		return true
	}), nil
}

// Executed records that opID's provider call returned.
func (s *Store) Executed(_ context.Context, id, opID string, now time.Time) error {
	s.with(id, func(r *row) bool {
		if !isOp(r, opID) {
			return false
		}
		r.w.OpExecuted, r.w.OpLeaseUntil, r.w.UpdatedAt = true, nil, ms(now)
		return true
	})
	return nil
}

// SetArchiveKey records the archive written by opID.
func (s *Store) SetArchiveKey(_ context.Context, id, opID, key string, now time.Time) error {
	ok := s.with(id, func(r *row) bool {
		if !isOp(r, opID) {
			return false
		}
		r.w.ArchiveKey, r.w.UpdatedAt = key, ms(now)
		return true
	})
	if !ok {
		return fmt.Errorf("%w: %s: operation %s no longer in flight", workspace.ErrConflict, id, opID)
	}
	return nil
}

// ChooseArchive makes key the archive the next restore uses (see store.Store.ChooseArchive).
func (s *Store) ChooseArchive(_ context.Context, id, key string, now time.Time) (workspace.Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.lookupLocked(id)
	if err != nil {
		return workspace.Workspace{}, err
	}
	failed := r.w.Operation == workspace.OpRestoring && r.w.ErrorInfo != nil && r.w.ErrorInfo.IsTerminal
	if !failed && (r.w.ObservedStatus != workspace.Pending || r.w.Operation != workspace.OpNone || r.w.DesiredState == workspace.Deleted) {
		return snapshot(r), fmt.Errorf("%w: workspace %s is %s with operation %s: only an archived workspace with no operation in flight, or one whose restore failed, takes another archive",
			workspace.ErrConflict, id, r.w.ObservedStatus, r.w.Operation)
	}
	if failed {
		clearOp(&r.w, now)
	}
	r.w.ArchiveKey, r.w.UpdatedAt = key, ms(now)
	return snapshot(r), nil
}

// isOp reports whether r's op_id is opID (as SQL's op_id = ?, which a
// row that never had an operation, op_id NULL, never matches).
func isOp(r *row, opID string) bool { return r.w.OpID != "" && r.w.OpID == opID }

// inFlight reports whether opID is id's operation in flight.
func inFlight(r *row, opID string) bool { return r.w.OpID == opID && r.w.Operation != workspace.OpNone }

// Failed records a failed provider call of opID.
func (s *Store) Failed(_ context.Context, id, opID string, count int, info *workspace.ErrorInfo, now time.Time, next *time.Time) error {
	s.with(id, func(r *row) bool {
		if !inFlight(r, opID) {
			return false
		}
		c := &r.w
		c.ErrorCount, c.ErrorInfo, c.LastRetryAt, c.NextRetryAt = count, copyInfo(info), msPtr(now), nil
		if next != nil {
			c.NextRetryAt = msPtr(*next)
		}
		if info != nil && info.IsTerminal {
			c.PreviousStatus = c.ObservedStatus
		}
		c.UpdatedAt = ms(now)
		return true
	})
	return nil
}

// Crashed is Failed for an executed start whose command ended: the
// operation is to be executed again.
func (s *Store) Crashed(ctx context.Context, id, opID string, count int, info *workspace.ErrorInfo, now time.Time, next *time.Time) error {
	executed := false
	s.with(id, func(r *row) bool { executed = inFlight(r, opID) && r.w.OpExecuted; return false })
	if !executed {
		return nil
	}
	s.Failed(ctx, id, opID, count, info, now, next)
	s.with(id, func(r *row) bool {
		if !inFlight(r, opID) {
			return false
		}
		r.w.OpExecuted, r.w.OpLeaseUntil = false, nil
		return true
	})
	return nil
}

// Terminal records terminal error info for opID; the operation stays.
func (s *Store) Terminal(_ context.Context, id, opID string, info *workspace.ErrorInfo, now time.Time) error {
	s.with(id, func(r *row) bool {
		if !inFlight(r, opID) {
			return false
		}
		r.w.ErrorInfo, r.w.PreviousStatus, r.w.UpdatedAt = copyInfo(info), r.w.ObservedStatus, ms(now)
		return true
	})
	return nil
}

// clearOp ends the operation in flight and its error state (op_id stays).
func clearOp(c *workspace.Workspace, now time.Time) {
	c.Operation, c.OpOwner, c.OpLeaseUntil, c.OpExecuted = workspace.OpNone, "", nil, false
	c.ErrorCount, c.ErrorInfo, c.NextRetryAt, c.UpdatedAt = 0, nil, nil, ms(now)
}

// startOp writes what a claim of op under opID writes (store.Store.Claim).
func startOp(c *workspace.Workspace, op workspace.Operation, opID, owner string, now, leaseUntil time.Time) {
	c.Operation, c.OpID, c.OpStartedAt, c.OpOwner, c.OpLeaseUntil = op, opID, msPtr(now), owner, msPtr(leaseUntil)
	c.OpExecuted, c.NextRetryAt, c.UpdatedAt = false, nil, ms(now)
	c.RestartPending = false
}

// CompleteRestart ends w's operation keeping the error count and info, if
// the row still shows what w shows (store.Store.Complete).
func (s *Store) CompleteRestart(_ context.Context, w workspace.Workspace, now time.Time) (bool, error) {
	return s.with(w.ID, func(r *row) bool {
		if !inFlight(r, w.OpID) || !seen(r, w) {
			return false
		}
		count, info := r.w.ErrorCount, r.w.ErrorInfo
		clearOp(&r.w, now)
		r.w.ErrorCount, r.w.ErrorInfo = count, info
		return true
	}), nil
}

// Abandon gives up w's operation, if the row still shows what w shows and
// no other owner's lease is live (store.Store.Abandon).
func (s *Store) Abandon(_ context.Context, w workspace.Workspace, owner string, now time.Time) (bool, error) {
	return s.with(w.ID, func(r *row) bool {
		c := &r.w
		if !inFlight(r, w.OpID) || c.Operation != w.Operation || c.OpExecuted != w.OpExecuted || c.ErrorCount != w.ErrorCount || !seen(r, w) {
			return false
		}
		if !leaseFree(c, owner, now) {
			return false
		}
		clearOp(c, now)
		return true
	}), nil
}

// Complete ends w's operation, if the row still shows what w shows
// (store.Store.Complete).
func (s *Store) Complete(_ context.Context, w workspace.Workspace, now time.Time) (bool, error) {
	return s.with(w.ID, func(r *row) bool {
		if !inFlight(r, w.OpID) || !seen(r, w) {
			return false
		}
		clearOp(&r.w, now)
		return true
	}), nil
}

// CompleteAndClaim ends w's operation and claims op under opID, if the
// row still shows what w shows (store.Store.CompleteAndClaim).
func (s *Store) CompleteAndClaim(_ context.Context, w workspace.Workspace, op workspace.Operation, opID, owner string, now, leaseUntil time.Time) (bool, error) {
	return s.with(w.ID, func(r *row) bool {
		if !inFlight(r, w.OpID) || !seen(r, w) {
			return false
		}
		clearOp(&r.w, now)
		startOp(&r.w, op, opID, owner, now, leaseUntil)
		return true
	}), nil
}

// seen reports whether r shows w's planning inputs (store.planSeen).
func seen(r *row, w workspace.Workspace) bool {
	return r.w.ObservedStatus == w.ObservedStatus && r.w.DesiredState == w.DesiredState && r.w.ArchiveKey == w.ArchiveKey
}

// DeleteRow removes the workspace once DELETING opID has run.
func (s *Store) DeleteRow(_ context.Context, id, opID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.rows[id]; ok && r.w.OpID == opID && r.w.Operation == workspace.OpDeleting {
		delete(s.rows, id)
	}
	return nil
}

// UpdateSpec applies u to the workspace's image, command and spec.
func (s *Store) UpdateSpec(_ context.Context, id string, u workspace.SpecUpdate, now time.Time) (workspace.Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.lookupLocked(id)
	if err != nil {
		return workspace.Workspace{}, err
	}
	nw, err := u.Apply(r.w)
	if err != nil {
		return workspace.Workspace{}, err
	}
	nw.Env = slices.Clone(nw.Env)
	nw.UpdatedAt = ms(now)
	r.w = nw
	return snapshot(r), nil
}

// Recover clears error info, count and operation (op_id kept).
func (s *Store) Recover(_ context.Context, id string, now time.Time) (workspace.Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.lookupLocked(id)
	if err != nil {
		return workspace.Workspace{}, err
	}
	clearOp(&r.w, now)
	return snapshot(r), nil
}

// SetObserved writes observed_status under store.Store.SetObserved's
// conditions.
func (s *Store) SetObserved(_ context.Context, w workspace.Workspace, status workspace.Status, now time.Time) (bool, error) {
	return s.with(w.ID, func(r *row) bool {
		c := &r.w
		if (c.ObservedStatus == status && c.Operation == workspace.OpNone) || c.Operation != w.Operation || c.OpID != w.OpID {
			return false
		}
		c.ObservedStatus, c.ObservedAt = status, msPtr(now)
		if monitors(c.ErrorInfo) {
			c.ErrorInfo, c.UpdatedAt = nil, ms(now)
		}
		return true
	}), nil
}

// SetObservedComplete writes observed_status and ends the executed
// operation under store.Store.SetObservedComplete's conditions.
func (s *Store) SetObservedComplete(_ context.Context, w workspace.Workspace, status workspace.Status, now time.Time) (bool, error) {
	return s.with(w.ID, func(r *row) bool {
		c := &r.w
		if c.Operation != w.Operation || !inFlight(r, w.OpID) || !c.OpExecuted || c.ErrorInfo != nil || c.ArchiveKey != w.ArchiveKey {
			return false
		}
		c.ObservedStatus, c.ObservedAt = status, msPtr(now)
		clearOp(c, now)
		return true
	}), nil
}

func monitors(info *workspace.ErrorInfo) bool {
	return info != nil && info.Reason == workspace.ReasonObserveFailed
}

// SetObserveError records a failed observation unless the reconciler's
// error info is there.
func (s *Store) SetObserveError(_ context.Context, id string, info *workspace.ErrorInfo, now time.Time) (bool, error) {
	return s.with(id, func(r *row) bool {
		if r.w.ErrorInfo != nil && !monitors(r.w.ErrorInfo) {
			return false
		}
		r.w.ErrorInfo, r.w.UpdatedAt = copyInfo(info), ms(now)
		return true
	}), nil
}

// ClearObserveError removes the monitor's own error info.
func (s *Store) ClearObserveError(_ context.Context, id string, now time.Time) (bool, error) {
	return s.with(id, func(r *row) bool {
		if !monitors(r.w.ErrorInfo) {
			return false
		}
		r.w.ErrorInfo, r.w.UpdatedAt = nil, ms(now)
		return true
	}), nil
}

// Touch records user activity and bumps the desired version.
func (s *Store) Touch(_ context.Context, id string, now time.Time) error {
	if !s.with(id, func(r *row) bool { r.lastActivity = msPtr(now); r.version++; return true }) {
		return fmt.Errorf("%w: workspace %s", workspace.ErrNotFound, id)
	}
	return nil
}

// TTLCandidates reads the converged RUNNING and STANDBY rows.
func (s *Store) TTLCandidates(context.Context) ([]store.TTLCandidate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.TTLCandidate
	for _, r := range s.rows {
		w := r.w
		if w.Operation != workspace.OpNone || w.DesiredState != w.ObservedStatus || (w.ObservedStatus != workspace.Running && w.ObservedStatus != workspace.Standby) {
			continue
		}
		since := w.CreatedAt
		for _, t := range []*time.Time{w.ObservedAt, r.lastActivity} {
			if t != nil && t.After(since) {
				since = *t
			}
		}
		out = append(out, store.TTLCandidate{ID: w.ID, Observed: w.ObservedStatus, Version: r.version, Since: since})
	}
	return out, nil
}

// SetDesiredIfVersion is the TTL manager's compare-and-set.
func (s *Store) SetDesiredIfVersion(_ context.Context, id string, from workspace.Status, version int64, to workspace.Status, now time.Time) (bool, error) {
	return s.with(id, func(r *row) bool {
		if r.w.DesiredState != from || r.version != version || r.w.Operation != workspace.OpNone {
			return false
		}
		r.w.DesiredState, r.w.UpdatedAt = to, ms(now)
		r.version++
		return true
	}), nil
}

// FencedBy returns the store itself: there is no leader in one process.
func (s *Store) FencedBy(store.Execer) store.DesiredWriter { return s }
