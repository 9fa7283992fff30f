package store

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/workspace"
)

// Abandon gives up w's operation for a change of desired state that makes
// it pointless (the reconciler's Superseded): operation NONE, error count,
// error info and retry time cleared, as Complete leaves the row (op_id
// stays). It is a compare-and-set on everything that decision was made
// from: the operation (op_id), not executed or executed as w shows,
// w's error count (no failure since), the planning inputs (observed
// status, desired state, archive key), and no call of another replica
// possibly running (its lease lapsed, or owner holds it), as Acquire.
func (s *Store) Abandon(ctx context.Context, w workspace.Workspace, owner string, now time.Time) (bool, error) {
	n, err := s.exec(ctx, endOp+`
		WHERE id = ? AND op_id = ? AND operation = ? AND operation <> 'NONE' AND op_executed = ? AND error_count = ?`+leaseFree+planSeen,
		now.UnixMilli(), w.ID, w.OpID, string(w.Operation), boolInt(w.OpExecuted), w.ErrorCount, owner, now.UnixMilli(),
		string(w.ObservedStatus), string(w.DesiredState), w.ArchiveKey)
	return n == 1, err
}
