package store

import (
	"context"
	"iter"

	"github.com/gantryhq/gantry/workspace"
)

// Reads of every workspace's state without its spec: what the live hub's
// resync and the health monitor's pass need, at a fraction of a full
// read's cost over 100,000 rows.

// stateCols is cols with the spec's columns (image, command, spec) read
// as empty: a workspace's state without what it runs.
const stateCols = `id, name, owner, '', '', desired_state, observed_status, observed_at, operation, op_id,
	op_started_at, op_owner, op_lease_until, op_executed, archive_key, error_count, error_info,
	previous_status, last_retry_at, next_retry_at, created_at, updated_at, '', restart`

// States yields every workspace without its spec (Image, Command and Spec
// left empty), in no order, a row at a time: the live hub's resync reads
// the whole table this way, neither holding every row at once nor decoding
// any spec (at 100,000 workspaces, List's cost was mostly those two). A
// read error ends it, yielded last with a zero workspace.
func (s *Store) States(ctx context.Context) iter.Seq2[workspace.Workspace, error] {
	return func(yield func(workspace.Workspace, error) bool) {
		rows, err := s.db.QueryContext(ctx, `SELECT `+stateCols+` FROM workspaces`)
		if err != nil {
			yield(workspace.Workspace{}, err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			w, err := scanWorkspace(rows)
			if err != nil {
				yield(w, err)
				return
			}
			if !yield(w, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(workspace.Workspace{}, err)
		}
	}
}

// ListStates reads every workspace without its spec (as States), in no
// order: the health monitor's pass, which observes states alone.
func (s *Store) ListStates(ctx context.Context) ([]workspace.Workspace, error) {
	return s.query(ctx, `SELECT `+stateCols+` FROM workspaces`)
}
