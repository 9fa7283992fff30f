package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/gantryhq/gantry/workspace"
)

// TTLCandidate is a converged, idle-able row as the TTL manager sees it.
type TTLCandidate struct {
	ID       string
	Observed workspace.Status
	Version  int64     // desired_version: the TTL manager's compare-and-set
	Since    time.Time // latest of: entered this status, last activity, created
}

// TTLCandidates reads the converged, idle-able rows: desired = observed in
// RUNNING or STANDBY with no operation in flight; never an unclaimed pool
// member, which waits RUNNING for its claim.
func (s *Store) TTLCandidates(ctx context.Context) ([]TTLCandidate, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, observed_status, desired_version, created_at, observed_at, last_activity_at
		FROM workspaces WHERE operation = 'NONE' AND desired_state = observed_status AND observed_status IN ('RUNNING', 'STANDBY') AND pool IS NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TTLCandidate
	for rows.Next() {
		var c TTLCandidate
		var created int64
		var observedAt, activity sql.NullInt64
		if err := rows.Scan(&c.ID, &c.Observed, &c.Version, &created, &observedAt, &activity); err != nil {
			return nil, err
		}
		since := created
		for _, v := range []sql.NullInt64{observedAt, activity} {
			if v.Valid && v.Int64 > since {
				since = v.Int64
			}
		}
		c.Since = time.UnixMilli(since)
		out = append(out, c)
	}
	return out, rows.Err()
}

// setDesiredIfVersionSQL is the TTL manager's CAS (arguments: to, now, id,
// from, version), run by the store or through the leader's session.
const setDesiredIfVersionSQL = `UPDATE workspaces SET desired_state = ?, desired_version = desired_version + 1, updated_at = ?
	WHERE id = ? AND desired_state = ? AND desired_version = ? AND operation = 'NONE'`

// SetDesiredIfVersion is the TTL manager's only write: desired_state from →
// to, if the row's desired_state is still from and its desired_version is
// still version. It bumps the version. Reports whether it wrote.
func (s *Store) SetDesiredIfVersion(ctx context.Context, id string, from workspace.Status, version int64, to workspace.Status, now time.Time) (bool, error) {
	n, err := s.exec(ctx, setDesiredIfVersionSQL, string(to), now.UnixMilli(), id, string(from), version)
	return n == 1, err
}

// Execer runs one statement ($n placeholders) on a connection the caller
// holds, e.g. the leader's lock connection (leader.Session), which refuses
// it once leadership is lost.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
}

// Fenced runs the leader-only writes through an Execer, so a deposed
// leader's write never lands.
type Fenced struct {
	s  *Store
	ex Execer
}

// FencedBy returns the store's leader-only writes run through ex.
func (s *Store) FencedBy(ex Execer) DesiredWriter { return &Fenced{s: s, ex: ex} }

// SetDesiredIfVersion is Store.SetDesiredIfVersion through the fence.
func (f *Fenced) SetDesiredIfVersion(ctx context.Context, id string, from workspace.Status, version int64, to workspace.Status, now time.Time) (bool, error) {
	n, err := f.ex.Exec(ctx, f.s.rebind(setDesiredIfVersionSQL), string(to), now.UnixMilli(), id, string(from), version)
	return n == 1, err
}

// Touch records user activity on a workspace (`gantry ws touch ID`, and
// every API call that acts on it): it resets the idle clock and bumps the
// desired version, so a TTL decision taken before it cannot land.
func (s *Store) Touch(ctx context.Context, id string, now time.Time) error {
	n, err := s.exec(ctx, `UPDATE workspaces SET last_activity_at = ?, desired_version = desired_version + 1 WHERE id = ?`, now.UnixMilli(), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: workspace %s", workspace.ErrNotFound, id)
	}
	return nil
}

// DesiredVersion reads a workspace's desired_version and last activity.
func (s *Store) DesiredVersion(ctx context.Context, id string) (int64, *time.Time, error) {
	var v int64
	var act sql.NullInt64
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT desired_version, last_activity_at FROM workspaces WHERE id = ?`), id).Scan(&v, &act)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, fmt.Errorf("%w: workspace %s", workspace.ErrNotFound, id)
	}
	return v, msPtr(act), err
}

// MarkDeleted sets desired_state DELETED (the reconciler then stops the
// workspace, removes its volume and archives, and drops the row).
func (s *Store) MarkDeleted(ctx context.Context, id string, now time.Time) error {
	n, err := s.exec(ctx, `UPDATE workspaces SET desired_state = 'DELETED', updated_at = ? WHERE id = ?`, now.UnixMilli(), id)
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: %q", workspace.ErrNotFound, id)
	}
	return err
}

// LeaderLockID derives the leader lock key from the database and schema the
// store uses (Postgres only): replicas of one deployment agree on it, and
// two deployments (or two tests) in one Postgres never contend.
func (s *Store) LeaderLockID(ctx context.Context) (int64, error) {
	var where string
	if err := s.db.QueryRowContext(ctx, `SELECT current_database() || '/' || current_schema()`).Scan(&where); err != nil {
		return 0, fmt.Errorf("store: leader lock id: %w", err)
	}
	h := fnv.New64a()
	h.Write([]byte("gantry-ws-leader/" + where))
	return int64(h.Sum64() >> 2), nil // positive, and its high half fits pg_locks.classid as a non-negative int
}

// DesiredWriter is the TTL manager's compare-and-set on desired_state.
type DesiredWriter interface {
	SetDesiredIfVersion(ctx context.Context, id string, from workspace.Status, version int64, to workspace.Status, now time.Time) (bool, error)
}

var (
	_ DesiredWriter = (*Store)(nil)
	_ DesiredWriter = (*Fenced)(nil)
)
