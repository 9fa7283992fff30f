package store

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/workspace"
)

// observeFailedPrefix is how every error_info the HealthMonitor writes
// starts (ErrorInfo marshals reason first), so one conditional UPDATE can
// tell the monitor's own error info from the reconciler's, on both
// dialects, without parsing JSON.
const observeFailedPrefix = `{"reason":"` + workspace.ReasonObserveFailed + `",`

// SetObserveError records that observing id failed. It never overwrites the
// reconciler's error info (an operation's failure or a terminal error): it
// writes only when error_info is empty or is already the monitor's.
// Reports whether it wrote.
func (s *Store) SetObserveError(ctx context.Context, id string, info *workspace.ErrorInfo, now time.Time) (bool, error) {
	n, err := s.exec(ctx, `UPDATE workspaces SET error_info = ?, updated_at = ?
		WHERE id = ? AND (error_info IS NULL OR error_info LIKE ?)`,
		info.JSON(), now.UnixMilli(), id, observeFailedPrefix+"%")
	return n == 1, err
}

// ClearObserveError removes the monitor's own error info once an
// observation succeeds again; the reconciler's is left alone. Reports
// whether it cleared anything.
func (s *Store) ClearObserveError(ctx context.Context, id string, now time.Time) (bool, error) {
	n, err := s.exec(ctx, `UPDATE workspaces SET error_info = NULL, updated_at = ? WHERE id = ? AND error_info LIKE ?`,
		now.UnixMilli(), id, observeFailedPrefix+"%")
	return n == 1, err
}
