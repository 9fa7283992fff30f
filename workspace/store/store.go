package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "modernc.org/sqlite"             // driver "sqlite"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
)

// Dialect is the SQL flavour of a Store.
type Dialect int

const (
	SQLite Dialect = iota
	Postgres
)

func (d Dialect) String() string {
	if d == Postgres {
		return "postgres"
	}
	return "sqlite"
}

// Store is the workspaces table on SQLite or Postgres. Every write that
// races another writer is a single conditional UPDATE (compare-and-set), so
// the same code is correct on one SQLite file and on a Postgres shared by
// replicas. Times are passed in by the caller (its clock).
type Store struct {
	db      *sql.DB
	dialect Dialect
	dsn     string
	// batch runs the statements of concurrent callers as one unit
	// (batch.go): on SQLite one BEGIN IMMEDIATE … COMMIT per batch on
	// the single writer, on Postgres one pipelined round trip; reads by id
	// as one SELECT … IN (…).
	batch *batcher
	// turn serializes this process's write transactions on SQLite
	// (turn.go); nil on Postgres.
	turn      chan struct{}
	closeOnce sync.Once
	// afterSetDesired, if set (tests), runs between SetDesiredOf's write
	// and its read back: where a reconciler's delete can land.
	afterSetDesired atomic.Pointer[func(id string)]
}

// Options are what Open takes besides the DSN. The zero value is the
// default.
type Options struct {
	// Gate, if set, holds the bulk batches back while urgent work is in
	// flight (urgent.go); nil = they never wait.
	Gate Gate
}

// Open opens dsn ("sqlite:PATH", "postgres://…" or "postgresql://…")
// and applies the embedded migrations.
func Open(ctx context.Context, dsn string) (*Store, error) {
	return open(ctx, dsn, math.MaxInt, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, dsn string, o Options) (*Store, error) {
	return open(ctx, dsn, math.MaxInt, o)
}

// OpenAtVersion is Open with the migrations up to version only: upgrade
// tests build a previous release's database with it (0100 is the schema
// before owners and tokens).
func OpenAtVersion(ctx context.Context, dsn string, version int) (*Store, error) {
	return open(ctx, dsn, version, Options{})
}

func open(ctx context.Context, dsn string, version int, o Options) (*Store, error) {
	var s *Store
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		if path == "" {
			return nil, fmt.Errorf("%w: --db sqlite: needs a path (sqlite:PATH)", workspace.ErrBadInput)
		}
		// mmap_size: reads go through a mapping of the file instead of a
		// pread per page missing from each connection's 2 MB page cache
		// (a 100,000-workspace table is ~60 MB): -8% CPU converging 100k.
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=mmap_size(1073741824)&_txlock=immediate")
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(8)
		s = &Store{db: db, dialect: SQLite, dsn: dsn}
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(32)
		db.SetMaxIdleConns(32)
		s = &Store{db: db, dialect: Postgres, dsn: dsn}
	default:
		return nil, fmt.Errorf("%w: --db %q, want sqlite:PATH or postgres://…", workspace.ErrBadInput, dsn)
	}
	s.turn = newTurn(s.dialect)
	if err := s.migrate(ctx, version); err != nil {
		s.db.Close()
		return nil, err
	}
	s.batch = newBatcher(s, o.Gate)
	return s, nil
}

// Close stops the writer and closes the database.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.batch != nil {
			s.batch.close()
		}
	})
	return s.db.Close()
}

// Dialect reports the store's SQL flavour.
func (s *Store) Dialect() Dialect { return s.dialect }

// DSN is the string the store was opened with.
func (s *Store) DSN() string { return s.dsn }

// rebind turns ? placeholders into $n for Postgres.
func (s *Store) rebind(q string) string {
	if s.dialect != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// exec runs one write (with ? placeholders) through the batcher.
func (s *Store) exec(ctx context.Context, q string, args ...any) (int64, error) {
	return s.batch.exec(ctx, q, args)
}

const cols = `id, name, owner, image, command, desired_state, observed_status, observed_at, operation, op_id,
	op_started_at, op_owner, op_lease_until, op_executed, archive_key, error_count, error_info,
	previous_status, last_retry_at, next_retry_at, created_at, updated_at, spec, restart`

type scanner interface{ Scan(dest ...any) error }

func scanWorkspace(r scanner) (workspace.Workspace, error) {
	var w workspace.Workspace
	var observedAt, opStarted, lease, lastRetry, nextRetry sql.NullInt64
	var opID, owner, key, info, prev sql.NullString
	var executed, restart int
	var created, updated int64
	var spec string
	err := r.Scan(&w.ID, &w.Name, &w.Owner, &w.Image, &w.Command, &w.DesiredState, &w.ObservedStatus, &observedAt,
		&w.Operation, &opID, &opStarted, &owner, &lease, &executed, &key, &w.ErrorCount, &info,
		&prev, &lastRetry, &nextRetry, &created, &updated, &spec, &restart)
	if err != nil {
		return w, err
	}
	if spec != "" {
		if err := json.Unmarshal([]byte(spec), &w.Spec); err != nil {
			return w, fmt.Errorf("workspace %s: spec: %w", w.ID, err)
		}
	}
	w.ObservedAt, w.OpStartedAt, w.OpLeaseUntil = msPtr(observedAt), msPtr(opStarted), msPtr(lease)
	w.LastRetryAt, w.NextRetryAt = msPtr(lastRetry), msPtr(nextRetry)
	w.OpID, w.OpOwner, w.ArchiveKey, w.PreviousStatus = opID.String, owner.String, key.String, workspace.Status(prev.String)
	w.OpExecuted, w.RestartPending = executed != 0, restart != 0
	w.CreatedAt, w.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	if info.Valid && info.String != "" {
		w.ErrorInfo = new(workspace.ErrorInfo)
		if err := json.Unmarshal([]byte(info.String), w.ErrorInfo); err != nil {
			return w, fmt.Errorf("workspace %s: error_info: %w", w.ID, err)
		}
	}
	return w, nil
}

func msPtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMilli(v.Int64).UTC()
	return &t
}

// Create inserts a new workspace (observed PENDING, no archive) owned by
// n.Owner (default admin), with no quota.
func (s *Store) Create(ctx context.Context, n workspace.NewWorkspace, now time.Time) (workspace.Workspace, error) {
	return s.CreateWithin(ctx, n, auth.Quotas{}, now)
}

const insertSQL = `INSERT INTO workspaces (id, name, owner, image, command, desired_state, observed_status, created_at, updated_at, spec, archive_key)
	VALUES (?, ?, ?, ?, ?, ?, 'PENDING', ?, ?, ?, ?)`

// specJSON is the spec column's value: ” for an empty spec.
func specJSON(s workspace.Spec) string {
	if len(s.Env) == 0 {
		s.Env = nil
	}
	s.Apps = workspace.StoredApps(s.Apps)
	b, _ := json.Marshal(s)
	if string(b) == "{}" {
		return ""
	}
	return string(b)
}

// CreateWithin is Create under the owner's quotas: a *auth.QuotaError if
// the new workspace would exceed one. The check and the insert are one
// transaction holding the owner's lock, so concurrent creates by one owner,
// on any replica, are admitted one at a time.
func (s *Store) CreateWithin(ctx context.Context, n workspace.NewWorkspace, q auth.Quotas, now time.Time) (workspace.Workspace, error) {
	if err := n.Validate(); err != nil {
		return workspace.Workspace{}, err
	}
	id, err := newID(n.ID)
	if err != nil {
		return workspace.Workspace{}, err
	}
	ms := now.UnixMilli()
	archive := sql.NullString{String: n.ArchiveKey, Valid: n.ArchiveKey != ""}
	args := []any{id, n.Name, n.Owner, n.Image, n.Command, string(n.Desired), ms, ms, specJSON(n.Spec), archive}
	if q == (auth.Quotas{}) && n.Spec.Template == nil {
		_, err = s.exec(ctx, insertSQL, args...)
	} else {
		err = s.withOwnerLock(ctx, n.Owner, func(tx *sql.Tx) error {
			if ref := n.Spec.Template; ref != nil {
				if err := s.holdTemplate(ctx, tx, ref); err != nil {
					return err
				}
			}
			if err := s.checkQuotas(ctx, tx, n, q); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, s.rebind(insertSQL), args...)
			return err
		})
	}
	if err != nil {
		if isUnique(err) {
			return workspace.Workspace{}, fmt.Errorf("%w: %q", workspace.ErrNameTaken, n.Name)
		}
		return workspace.Workspace{}, err
	}
	return s.Get(ctx, id)
}

// newID is id if it is a UUID (a fork's, chosen before its archive was
// written), a new UUIDv7 if it is "".
func newID(id string) (string, error) {
	if id != "" {
		u, err := uuid.Parse(id)
		if err != nil {
			return "", fmt.Errorf("%w: workspace id %q: %v", workspace.ErrBadInput, id, err)
		}
		return u.String(), nil
	}
	u, err := uuid.NewV7()
	return u.String(), err
}

func isUnique(err error) bool {
	m := err.Error()
	return strings.Contains(m, "UNIQUE constraint") || strings.Contains(m, "23505")
}

// Get reads one workspace by id (or, failing that, by name: an error if
// several owners use that name).
func (s *Store) Get(ctx context.Context, id string) (workspace.Workspace, error) {
	return s.Lookup(ctx, id, "")
}

// Lookup reads one workspace by id or by name, among owner's workspaces
// only ("" = every owner's). Another owner's workspace is ErrNotFound, the
// same answer as a workspace that does not exist.
func (s *Store) Lookup(ctx context.Context, ref, owner string) (workspace.Workspace, error) {
	w, found, err := s.batch.get(ctx, ref)
	if err != nil {
		return w, err
	}
	if found && (owner == "" || w.Owner == owner) {
		return w, nil
	}
	q, args := `SELECT `+cols+` FROM workspaces WHERE name = ?`, []any{ref}
	if owner != "" {
		q, args = q+` AND owner = ?`, append(args, owner)
	}
	ws, err := s.query(ctx, q+` ORDER BY id LIMIT 2`, args...)
	switch {
	case err != nil:
		return workspace.Workspace{}, err
	case len(ws) == 0:
		return workspace.Workspace{}, fmt.Errorf("%w: %q", workspace.ErrNotFound, ref)
	case len(ws) > 1:
		return workspace.Workspace{}, fmt.Errorf("%w: several owners have a workspace named %q; use its id", workspace.ErrConflict, ref)
	}
	return ws[0], nil
}

func (s *Store) query(ctx context.Context, q string, args ...any) ([]workspace.Workspace, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []workspace.Workspace
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// List reads every workspace, oldest first.
func (s *Store) List(ctx context.Context) ([]workspace.Workspace, error) {
	return s.query(ctx, `SELECT `+cols+` FROM workspaces ORDER BY id`)
}

// ListOwned reads owner's workspaces, oldest first.
func (s *Store) ListOwned(ctx context.Context, owner string) ([]workspace.Workspace, error) {
	return s.query(ctx, `SELECT `+cols+` FROM workspaces WHERE owner = ? ORDER BY id`, owner)
}

// actionable is the reconciler's filter; it matches SQLite's partial index
// (Postgres has none: its writes stay heap-only, migration 0204).
const actionable = `operation <> 'NONE' OR (desired_state <> observed_status AND (observed_status <> 'ERROR' OR desired_state = 'DELETED'))
       OR (restart = 1 AND observed_status = 'RUNNING' AND desired_state = 'RUNNING')`

// ListActionable reads, in one query, the workspaces the reconciler may have
// to act on: an operation in flight, or desired ≠ observed outside ERROR.
func (s *Store) ListActionable(ctx context.Context) ([]workspace.Workspace, error) {
	return s.query(ctx, `SELECT `+cols+` FROM workspaces WHERE `+actionable)
}

// ListActionableIDs is ListActionable's ids alone (on SQLite, read from
// its partial index without touching the table): the reconciler's tick
// reads rows only for workspaces it has no process for.
func (s *Store) ListActionableIDs(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM workspaces WHERE `+actionable)
	if err != nil {
		return nil, err
	}
	return scanIDs(rows)
}

// scanIDs collects rows of one column, an id each, and closes rows.
func scanIDs(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// SetDesired writes desired_state. A workspace being deleted is a conflict.
func (s *Store) SetDesired(ctx context.Context, id string, desired workspace.Status, now time.Time) (workspace.Workspace, error) {
	return s.SetDesiredWithin(ctx, id, desired, auth.Quotas{}, now)
}

// setDesiredSQL bumps desired_version and last_activity_at: the TTL
// manager's compare-and-set (ttl.go) loses to any user write.
const setDesiredSQL = `UPDATE workspaces SET desired_state = ?, updated_at = ?, desired_version = desired_version + 1, last_activity_at = ?
	WHERE id = ? AND desired_state <> 'DELETED'`

// SetDesiredWithin is SetDesired under the owner's running quota: asking
// for RUNNING when the owner already has q.Running workspaces desired
// RUNNING is a *auth.QuotaError. Check and write hold the owner's lock.
func (s *Store) SetDesiredWithin(ctx context.Context, id string, desired workspace.Status, q auth.Quotas, now time.Time) (workspace.Workspace, error) {
	w, err := s.Get(ctx, id)
	if err != nil {
		return w, err
	}
	return s.SetDesiredOf(ctx, w, desired, q, now)
}

// SetDesiredOf is SetDesiredWithin for a row the caller has just read (the
// API's lookup): only its id and owner are used, which never change, so the
// write needs no read of its own.
func (s *Store) SetDesiredOf(ctx context.Context, w workspace.Workspace, desired workspace.Status, q auth.Quotas, now time.Time) (workspace.Workspace, error) {
	var err error
	ms := now.UnixMilli()
	var n int64
	if q.Running <= 0 || desired != workspace.Running {
		n, err = s.exec(ctx, setDesiredSQL, string(desired), ms, ms, w.ID)
	} else {
		err = s.withOwnerLock(ctx, w.Owner, func(tx *sql.Tx) error {
			if err := s.checkQuota(ctx, tx, w.Owner, w.ID, q.Running, "running workspaces", `desired_state = 'RUNNING'`); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, s.rebind(setDesiredSQL), string(desired), ms, ms, w.ID)
			if err == nil {
				n, err = res.RowsAffected()
			}
			return err
		})
	}
	if err != nil {
		return w, err
	}
	if n == 0 {
		return w, fmt.Errorf("%w: workspace %s is being deleted", workspace.ErrConflict, w.ID)
	}
	if f := s.afterSetDesired.Load(); f != nil {
		(*f)(w.ID)
	}
	got, err := s.Get(ctx, w.ID)
	if errors.Is(err, workspace.ErrNotFound) && desired == workspace.Deleted {
		// The reconciler finished the delete between the write and this
		// read (a workspace with nothing to tear down goes at once): the
		// delete asked for is done, not "not found".
		w.DesiredState = desired
		return w, nil
	}
	return got, err
}

// Claim is the seed's CAS: it sets the operation only if none is in flight
// and the row still shows what the plan was made from (observed, desired,
// archive key and last op_id: a plan from a stale snapshot never runs).
func (s *Store) Claim(ctx context.Context, w workspace.Workspace, op workspace.Operation, opID, owner string, now, leaseUntil time.Time) (bool, error) {
	n, err := s.exec(ctx, `UPDATE workspaces SET operation = ?, op_id = ?, op_started_at = ?, op_owner = ?, op_lease_until = ?,
		op_executed = 0, next_retry_at = NULL, restart = 0, updated_at = ?
		WHERE id = ? AND operation = 'NONE'`+planSeen+` AND COALESCE(op_id, '') = ?`,
		string(op), opID, now.UnixMilli(), owner, leaseUntil.UnixMilli(), now.UnixMilli(), w.ID, string(w.ObservedStatus), string(w.DesiredState),
		w.ArchiveKey, w.OpID)
	return n == 1, err
}

// Renew extends owner's lease on opID.
func (s *Store) Renew(ctx context.Context, id, opID, owner string, leaseUntil time.Time) (bool, error) {
	n, err := s.exec(ctx, `UPDATE workspaces SET op_lease_until = ? WHERE id = ? AND op_id = ? AND op_owner = ? AND operation <> 'NONE'`,
		leaseUntil.UnixMilli(), id, opID, owner)
	return n == 1, err
}

// Executed records that opID's provider call returned.
func (s *Store) Executed(ctx context.Context, id, opID string, now time.Time) error {
	_, err := s.exec(ctx, `UPDATE workspaces SET op_executed = 1, op_lease_until = NULL, updated_at = ? WHERE id = ? AND op_id = ?`, now.UnixMilli(), id, opID)
	return err
}

// SetArchiveKey records the archive written by opID.
func (s *Store) SetArchiveKey(ctx context.Context, id, opID, key string, now time.Time) error {
	n, err := s.exec(ctx, `UPDATE workspaces SET archive_key = ?, updated_at = ? WHERE id = ? AND op_id = ?`, key, now.UnixMilli(), id, opID)
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: %s: operation %s no longer in flight", workspace.ErrConflict, id, opID)
	}
	return err
}

// ChooseArchive makes key the archive workspace id's next restore uses.
// An archived workspace (observed PENDING) with no operation in flight
// takes one; so does a workspace whose restore failed for good (a
// tampered or missing archive), whose error it clears, so the restore runs
// again from key. Otherwise its volume is the newer data, or an operation
// is running: ErrConflict.
func (s *Store) ChooseArchive(ctx context.Context, id, key string, now time.Time) (workspace.Workspace, error) {
	w, err := s.Get(ctx, id)
	if err != nil {
		return w, err
	}
	var n int64
	if failedRestore(w) {
		n, err = s.exec(ctx, `UPDATE workspaces SET archive_key = ?, error_info = NULL, error_count = 0, operation = 'NONE',
			op_owner = NULL, op_lease_until = NULL, op_executed = 0, next_retry_at = NULL, updated_at = ?
			WHERE id = ? AND op_id = ? AND operation = 'RESTORING'`, key, now.UnixMilli(), id, w.OpID)
	} else {
		n, err = s.exec(ctx, `UPDATE workspaces SET archive_key = ?, updated_at = ?
			WHERE id = ? AND observed_status = 'PENDING' AND operation = 'NONE' AND desired_state <> 'DELETED'`, key, now.UnixMilli(), id)
	}
	if err != nil {
		return w, err
	}
	if n == 0 {
		return w, chooseConflict(w)
	}
	return s.Get(ctx, id)
}

// failedRestore reports whether w's restore failed for good.
func failedRestore(w workspace.Workspace) bool {
	return w.Operation == workspace.OpRestoring && w.ErrorInfo != nil && w.ErrorInfo.IsTerminal
}

// chooseConflict is ChooseArchive's refusal for w.
func chooseConflict(w workspace.Workspace) error {
	if w.ObservedStatus == workspace.Error || w.ErrorInfo != nil && w.ErrorInfo.IsTerminal {
		return fmt.Errorf("%w: workspace %s is in ERROR: recover it first (gantry ws recover %s) and wait for PENDING", workspace.ErrConflict, w.ID, w.ID)
	}
	if w.ObservedStatus != workspace.Pending {
		return fmt.Errorf("%w: workspace %s is %s: its volume holds newer data than any archive; archive it first (gantry ws archive %s)",
			workspace.ErrConflict, w.ID, w.ObservedStatus, w.ID)
	}
	return fmt.Errorf("%w: workspace %s has operation %s in flight (desired %s); wait for it, or recover it first", workspace.ErrConflict, w.ID, w.Operation, w.DesiredState)
}

// Failed records a failed provider call of opID: the new error count, the
// time of the next attempt, and error info (terminal or not).
func (s *Store) Failed(ctx context.Context, id, opID string, count int, info *workspace.ErrorInfo, now time.Time, next *time.Time) error {
	var nextMS any
	if next != nil {
		nextMS = next.UnixMilli()
	}
	_, err := s.exec(ctx, `UPDATE workspaces SET error_count = ?, error_info = ?, last_retry_at = ?, next_retry_at = ?,
		previous_status = CASE WHEN ? = 1 THEN observed_status ELSE previous_status END, updated_at = ?
		WHERE id = ? AND op_id = ? AND operation <> 'NONE'`,
		count, info.JSON(), now.UnixMilli(), nextMS, boolInt(info != nil && info.IsTerminal), now.UnixMilli(), id, opID)
	return err
}

// Crashed records that opID's executed start ended (the command exited
// before it was observed running): like Failed, and the operation is to be
// executed again (op_executed cleared) after next, unless terminal.
func (s *Store) Crashed(ctx context.Context, id, opID string, count int, info *workspace.ErrorInfo, now time.Time, next *time.Time) error {
	var nextMS any
	if next != nil {
		nextMS = next.UnixMilli()
	}
	_, err := s.exec(ctx, `UPDATE workspaces SET error_count = ?, error_info = ?, last_retry_at = ?, next_retry_at = ?,
		op_executed = 0, op_lease_until = NULL,
		previous_status = CASE WHEN ? = 1 THEN observed_status ELSE previous_status END, updated_at = ?
		WHERE id = ? AND op_id = ? AND operation <> 'NONE' AND op_executed = 1`,
		count, info.JSON(), now.UnixMilli(), nextMS, boolInt(info != nil && info.IsTerminal), now.UnixMilli(), id, opID)
	return err
}

// Terminal records terminal error info for opID (Timeout); the operation
// stays, as in the seed, until recover.
func (s *Store) Terminal(ctx context.Context, id, opID string, info *workspace.ErrorInfo, now time.Time) error {
	_, err := s.exec(ctx, `UPDATE workspaces SET error_info = ?, previous_status = observed_status, updated_at = ?
		WHERE id = ? AND op_id = ? AND operation <> 'NONE'`, info.JSON(), now.UnixMilli(), id, opID)
	return err
}

// Complete ends w's operation (w.OpID): operation NONE, error count and
// info cleared. Like Claim it is a compare-and-set on what the decision was
// made from: it writes only while the row still shows w's observed
// status, desired state and archive key, so the row it leaves is exactly w
// completed, and the reconciler plans its next step from that without a
// read, even when w came from a hint (package handoff).
func (s *Store) Complete(ctx context.Context, w workspace.Workspace, now time.Time) (bool, error) {
	n, err := s.exec(ctx, endOp+`
		WHERE id = ? AND op_id = ? AND operation <> 'NONE'`+planSeen,
		now.UnixMilli(), w.ID, w.OpID, string(w.ObservedStatus), string(w.DesiredState), w.ArchiveKey)
	return n == 1, err
}

// CompleteAndClaim is Complete and Claim in one write: it ends w's
// operation and claims op under opID, planned from the row as Complete
// leaves it (PROVISIONING done, STARTING next). The compare-and-set is
// Complete's: w's operation and the planning inputs op was planned from.
// One statement instead of two for every step from one operation to the
// next.
func (s *Store) CompleteAndClaim(ctx context.Context, w workspace.Workspace, op workspace.Operation, opID, owner string, now, leaseUntil time.Time) (bool, error) {
	n, err := s.exec(ctx, `UPDATE workspaces SET operation = ?, op_id = ?, op_started_at = ?, op_owner = ?, op_lease_until = ?,
		op_executed = 0, error_count = 0, error_info = NULL, next_retry_at = NULL, restart = 0, updated_at = ?
		WHERE id = ? AND op_id = ? AND operation <> 'NONE'`+planSeen,
		string(op), opID, now.UnixMilli(), owner, leaseUntil.UnixMilli(), now.UnixMilli(),
		w.ID, w.OpID, string(w.ObservedStatus), string(w.DesiredState), w.ArchiveKey)
	return n == 1, err
}

// CompleteRestart is Complete for a restart after the command ended: it
// keeps the error count and error info, so the crash loop's count goes on
// (see Config.CrashWindow).
func (s *Store) CompleteRestart(ctx context.Context, w workspace.Workspace, now time.Time) (bool, error) {
	n, err := s.exec(ctx, `UPDATE workspaces SET operation = 'NONE', op_owner = NULL, op_lease_until = NULL, op_executed = 0,
		next_retry_at = NULL, updated_at = ?
		WHERE id = ? AND op_id = ? AND operation <> 'NONE'`+planSeen,
		now.UnixMilli(), w.ID, w.OpID, string(w.ObservedStatus), string(w.DesiredState), w.ArchiveKey)
	return n == 1, err
}

// planSeen is the compare-and-set on the planning inputs a decision was
// made from (Claim, Complete): observed status, desired state, archive key.
const planSeen = `
		  AND observed_status = ? AND desired_state = ? AND COALESCE(archive_key, '') = ?`

// endOp is the write that ends an operation (Complete, Abandon): operation
// NONE, no owner or lease, error count, info and retry time cleared (op_id
// stays); updated_at is its first argument.
const endOp = `UPDATE workspaces SET operation = 'NONE', op_owner = NULL, op_lease_until = NULL, op_executed = 0,
		error_count = 0, error_info = NULL, next_retry_at = NULL, updated_at = ?`

// leaseFree is the condition that no other replica's call may be running:
// owner holds the lease, or it lapsed (Acquire, Abandon); owner and now
// follow as arguments.
const leaseFree = `
		  AND (op_owner = ? OR op_lease_until IS NULL OR op_lease_until < ?)`

// DeleteRow removes the workspace once DELETING opID has run.
func (s *Store) DeleteRow(ctx context.Context, id, opID string) error {
	_, err := s.exec(ctx, `DELETE FROM workspaces WHERE id = ? AND op_id = ? AND operation = 'DELETING'`, id, opID)
	return err
}

// SetObserved writes observed_status (and observed_at) if it changed, or
// if an operation is in flight (a takeover waits for an observation newer
// than the dead owner's lease), and only while the operation is
// still the one that was in flight when the observation started (so a slow
// observation never overwrites a newer one across an operation boundary).
//
// The observation succeeded, so the write also clears the monitor's own
// error info (ObserveFailed), as ClearObserveError would: the caller need
// not know it is there.
func (s *Store) SetObserved(ctx context.Context, w workspace.Workspace, status workspace.Status, now time.Time) (bool, error) {
	n, err := s.exec(ctx, `UPDATE workspaces SET observed_status = ?, observed_at = ?,
		updated_at = CASE WHEN error_info LIKE ? THEN ? ELSE updated_at END,
		error_info = CASE WHEN error_info LIKE ? THEN NULL ELSE error_info END
		WHERE id = ? AND (observed_status <> ? OR operation <> 'NONE') AND operation = ? AND COALESCE(op_id, '') = ?`,
		string(status), now.UnixMilli(), observeFailedPrefix+"%", now.UnixMilli(), observeFailedPrefix+"%",
		w.ID, string(status), string(w.Operation), w.OpID)
	return n == 1, err
}

// SetObservedComplete is SetObserved for an observation that shows w's
// executed operation at its target: one write records the status and ends
// the operation, as Complete would (the row the reconciler's next step
// would have written, one write sooner). It writes only while the row
// still holds that operation (op_id), executed, with no error info (a
// crash loop's restart, a failed observation or a terminal error needs
// the reconciler's judgement) and with w's archive key (an archive
// completes only with the key its operation wrote); otherwise nothing,
// and the caller writes the plain observation.
func (s *Store) SetObservedComplete(ctx context.Context, w workspace.Workspace, status workspace.Status, now time.Time) (bool, error) {
	n, err := s.exec(ctx, `UPDATE workspaces SET observed_status = ?, observed_at = ?, operation = 'NONE', op_owner = NULL,
		op_lease_until = NULL, op_executed = 0, error_count = 0, error_info = NULL, next_retry_at = NULL, updated_at = ?
		WHERE id = ? AND operation = ? AND operation <> 'NONE' AND op_id = ? AND op_executed = 1 AND error_info IS NULL
		  AND COALESCE(archive_key, '') = ?`,
		string(status), now.UnixMilli(), now.UnixMilli(), w.ID, string(w.Operation), w.OpID, w.ArchiveKey)
	return n == 1, err
}

// UpdateSpec applies u to workspace id's image, command and spec (taking
// effect at its next start) and returns the row. A concurrent update of
// the same workspace is not lost: the write only lands on the values it
// was computed from, and is computed again otherwise.
func (s *Store) UpdateSpec(ctx context.Context, id string, u workspace.SpecUpdate, now time.Time) (workspace.Workspace, error) {
	for range 10 {
		w, err := s.Get(ctx, id)
		if err != nil {
			return w, err
		}
		nw, err := u.Apply(w)
		if err != nil {
			return w, err
		}
		n, err := s.exec(ctx, `UPDATE workspaces SET image = ?, command = ?, spec = ?, updated_at = ?
			WHERE id = ? AND image = ? AND command = ? AND spec = ?`,
			nw.Image, nw.Command, specJSON(nw.Spec), now.UnixMilli(), id, w.Image, w.Command, specJSON(w.Spec))
		if err != nil || n == 1 {
			nw.UpdatedAt = now.UTC().Truncate(time.Millisecond)
			return nw, err
		}
	}
	return workspace.Workspace{}, fmt.Errorf("%w: workspace %s changed under ten updates in a row; try again", workspace.ErrConflict, id)
}

// Recover is the seed's manual recovery: error info, count and operation
// cleared (op_id kept). ErrNotFound for an unknown id.
func (s *Store) Recover(ctx context.Context, id string, now time.Time) (workspace.Workspace, error) {
	w, err := s.Get(ctx, id)
	if err != nil {
		return w, err
	}
	_, err = s.exec(ctx, `UPDATE workspaces SET error_info = NULL, error_count = 0, operation = 'NONE', op_owner = NULL,
		op_lease_until = NULL, op_executed = 0, next_retry_at = NULL, updated_at = ? WHERE id = ?`, now.UnixMilli(), w.ID)
	if err != nil {
		return w, err
	}
	return s.Get(ctx, w.ID)
}

// ExplainActionable returns the query plan of ListActionable (for tests
// and the benchmark: one indexed query per tick).
func (s *Store) ExplainActionable(ctx context.Context) (string, error) {
	q := `EXPLAIN QUERY PLAN SELECT ` + cols + ` FROM workspaces WHERE ` + actionable
	if s.dialect == Postgres {
		q = `EXPLAIN SELECT ` + cols + ` FROM workspaces WHERE ` + actionable
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	colsN, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(colsN))
		ptrs := make([]any, len(colsN))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
		fmt.Fprintln(&b, vals...)
	}
	return b.String(), rows.Err()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Acquire lets owner (re)execute opID that has not executed yet: its own
// retry, or a takeover once the previous owner's lease lapsed; only while
// the row still shows errorCount, the failures the decision counted (a
// retry decided from a row that predates the last failure would be one
// call more than the retry policy allows).
func (s *Store) Acquire(ctx context.Context, id, opID string, errorCount int, owner string, now, leaseUntil time.Time) (bool, error) {
	n, err := s.exec(ctx, `UPDATE workspaces SET op_owner = ?, op_lease_until = ?, updated_at = ?
		WHERE id = ? AND op_id = ? AND operation <> 'NONE' AND op_executed = 0 AND error_count = ?`+leaseFree,
		owner, leaseUntil.UnixMilli(), now.UnixMilli(), id, opID, errorCount, owner, now.UnixMilli())
	return n == 1, err
}

// BatchStats reports the statements run so far and the round trips
// (batches) they took; the convergence benchmark prints them.
func (s *Store) BatchStats() BatchStats { return s.batch.stats() }

// CountConverged counts the rows with observed = desired and no operation
// in flight; CountActionable those ListActionable returns. The convergence
// benchmark polls them.
func (s *Store) CountConverged(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM workspaces WHERE observed_status = desired_state AND operation = 'NONE'`).Scan(&n)
	return n, err
}

// CountActionable counts the rows ListActionable would return.
func (s *Store) CountActionable(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM workspaces WHERE `+actionable).Scan(&n)
	return n, err
}

// AnyActionable reports whether ListActionable would return a row: it
// stops at the first, where CountActionable scans them all (51 ms a call
// on Postgres with 100,000 left, a sixth of the server's time when the
// convergence benchmark polled it four times a second).
func (s *Store) AnyActionable(ctx context.Context) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM workspaces WHERE `+actionable+` LIMIT 1) AS one`).Scan(&n)
	return n > 0, err
}
