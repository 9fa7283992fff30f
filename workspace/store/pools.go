package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
)

// Pools is the warm pools (migration 0301, workspace/pool.go): each
// template's configured size (template_pools) and its unclaimed members,
// the workspaces whose pool column names it. Refills are serialized per
// pool (its template_pools row, locked), claims per claimer (the owner's
// lock, as creates), and a claim takes a member by a compare-and-set on its
// pool column, so a member is never handed out twice, on one SQLite file
// or across replicas on Postgres.
type Pools struct{ s *Store }

// Pools is s's warm pools.
func (s *Store) Pools() *Pools { return &Pools{s: s} }

// SetSize sets template name's pool size (0: drain it); ErrNotFound if the
// template does not exist.
func (ps *Pools) SetSize(ctx context.Context, name string, size int, now time.Time) error {
	if size < 0 || size > workspace.MaxPoolSize {
		return fmt.Errorf("%w: pool size %d, want 0–%d", workspace.ErrBadInput, size, workspace.MaxPoolSize)
	}
	s := ps.s
	release, err := s.takeTurn(ctx)
	if err != nil {
		return err
	}
	defer release()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// Version 1 lives as long as the template (Delete removes them all).
	if err := s.holdTemplate(ctx, tx, &workspace.TemplateRef{Name: name, Version: 1}); errors.Is(err, workspace.ErrNotFound) {
		return fmt.Errorf("%w: template %q", workspace.ErrNotFound, name)
	} else if err != nil {
		return err
	}
	q := `INSERT INTO template_pools (name, size, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET size = excluded.size, updated_at = excluded.updated_at`
	if _, err := tx.ExecContext(ctx, s.rebind(q), name, size, now.UnixMilli()); err != nil {
		return err
	}
	return tx.Commit()
}

// Sizes is every configured pool's size, by template name.
func (ps *Pools) Sizes(ctx context.Context) (map[string]int, error) {
	rows, err := ps.s.db.QueryContext(ctx, `SELECT name, size FROM template_pools`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var name string
		var size int
		if err := rows.Scan(&name, &size); err != nil {
			return nil, err
		}
		out[name] = size
	}
	return out, rows.Err()
}

// Status is template name's pool as it stands, its members counted
// against version (the template's latest).
func (ps *Pools) Status(ctx context.Context, name string, version int) (workspace.PoolStatus, error) {
	st := workspace.PoolStatus{Template: name, Version: version}
	err := ps.s.db.QueryRowContext(ctx, ps.s.rebind(`SELECT size FROM template_pools WHERE name = ?`), name).Scan(&st.Size)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return st, err
	}
	q := `SELECT
		COALESCE(SUM(CASE WHEN ` + readyMember + ` AND pool_version = ? THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN desired_state = 'DELETED' OR pool_version <> ? OR observed_status = 'ERROR' THEN 1 ELSE 0 END), 0),
		COUNT(*)
		FROM workspaces WHERE pool = ?`
	var all int
	if err := ps.s.db.QueryRowContext(ctx, ps.s.rebind(q), version, version, name).Scan(&st.Ready, &st.Draining, &all); err != nil {
		return st, err
	}
	st.Starting = all - st.Ready - st.Draining
	return st, nil
}

// readyMember is a claimable member's condition; its version is checked
// apart.
const readyMember = `desired_state = 'RUNNING' AND observed_status = 'RUNNING' AND operation = 'NONE'`

// liveMembers counts template name's members that stay: at version, not
// failed, not being deleted.
const liveMembers = `SELECT COUNT(*) FROM workspaces WHERE pool = ? AND pool_version = ? AND desired_state <> 'DELETED' AND observed_status <> 'ERROR'`

// Deficit is how many members template name's pool lacks at version
// (negative: how many too many), read without a lock: the refill's
// estimate of the members to prepare (their files copied) before Refill
// decides under the lock.
func (ps *Pools) Deficit(ctx context.Context, name string, version, size int) (int, error) {
	var live int
	err := ps.s.db.QueryRowContext(ctx, ps.s.rebind(liveMembers), name, version).Scan(&live)
	return size - live, err
}

// Refilled is what one Refill did.
type Refilled struct {
	Created []string                 // ids of the members added
	Drained []string                 // ids of the members given desired DELETED: older version, failed, surplus
	Unused  []workspace.NewWorkspace // of the prepared members, those not needed (their files to drop)
}

// Refill brings template name's pool to size members of version, holding
// the pool's row: it deletes the members of any other version, the failed
// ones (observed ERROR), those someone stopped and any beyond size (the not
// yet ready first), and adds from prepared (workspace.Template.PoolMember's)
// as many as are missing. Concurrent refills (a deposed leader's and the new
// one's) take turns, so the pool never holds more than size members that
// stay. A pool whose row or template version is gone (deleted meanwhile)
// is left alone: every prepared member comes back Unused.
func (ps *Pools) Refill(ctx context.Context, name string, version, size int, prepared []workspace.NewWorkspace, now time.Time) (Refilled, error) {
	release, err := ps.s.takeTurn(ctx)
	if err != nil {
		return Refilled{}, err
	}
	defer release()
	return ps.refill(ctx, name, version, size, prepared, now)
}

// refill is Refill in the store's write turn.
func (ps *Pools) refill(ctx context.Context, name string, version, size int, prepared []workspace.NewWorkspace, now time.Time) (Refilled, error) {
	s := ps.s
	var out Refilled
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return out, err
	}
	defer tx.Rollback()
	// The pool's row, locked: its size now (a SetSize since the caller
	// read it wins if smaller), or no pool at all (its template deleted
	// since): then nothing changes. And the version filled must exist.
	lock := `SELECT size FROM template_pools WHERE name = ?`
	if s.dialect == Postgres {
		lock += ` FOR UPDATE`
	}
	var locked int
	if err := tx.QueryRowContext(ctx, s.rebind(lock), name).Scan(&locked); errors.Is(err, sql.ErrNoRows) {
		return Refilled{Unused: prepared}, nil
	} else if err != nil {
		return out, err
	}
	if err := s.holdTemplate(ctx, tx, &workspace.TemplateRef{Name: name, Version: version}); errors.Is(err, workspace.ErrNotFound) {
		return Refilled{Unused: prepared}, nil
	} else if err != nil {
		return out, err
	}
	size = min(size, locked)
	ms := now.UnixMilli()
	drain := `UPDATE workspaces SET desired_state = 'DELETED', updated_at = ?, desired_version = desired_version + 1
		WHERE pool = ? AND desired_state <> 'DELETED' AND (pool_version <> ? OR observed_status = 'ERROR' OR desired_state <> 'RUNNING') RETURNING id`
	if out.Drained, err = queryIDs(ctx, tx, s.rebind(drain), ms, name, version); err != nil {
		return out, err
	}
	var live int
	if err := tx.QueryRowContext(ctx, s.rebind(liveMembers), name, version).Scan(&live); err != nil {
		return out, err
	}
	if live > size {
		// The outer conditions again: Postgres re-checks only those on a
		// row a concurrent claim held, which has left the pool since.
		trim := `UPDATE workspaces SET desired_state = 'DELETED', updated_at = ?, desired_version = desired_version + 1
			WHERE pool = ? AND desired_state <> 'DELETED' AND id IN (SELECT id FROM workspaces WHERE pool = ? AND desired_state <> 'DELETED'
				ORDER BY CASE WHEN ` + readyMember + ` THEN 1 ELSE 0 END, id DESC LIMIT ?) RETURNING id`
		trimmed, err := queryIDs(ctx, tx, s.rebind(trim), ms, name, name, live-size)
		if err != nil {
			return out, err
		}
		out.Drained = append(out.Drained, trimmed...)
	}
	need := max(size-live, 0)
	for i, m := range prepared {
		if i >= need {
			out.Unused = append(out.Unused, m)
			continue
		}
		if err := s.insertMember(ctx, tx, name, version, m, ms); err != nil {
			return Refilled{}, err
		}
		out.Created = append(out.Created, m.ID)
	}
	if err := tx.Commit(); err != nil {
		return Refilled{}, err
	}
	return out, nil
}

func (s *Store) insertMember(ctx context.Context, tx *sql.Tx, name string, version int, m workspace.NewWorkspace, ms int64) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if m.ID == "" || m.Owner != workspace.PoolOwner(m.ID) {
		return fmt.Errorf("%w: pool %s: a member needs an id and the pool's owner of it", workspace.ErrBadInput, name)
	}
	archive := sql.NullString{String: m.ArchiveKey, Valid: m.ArchiveKey != ""}
	q := `INSERT INTO workspaces (id, name, owner, image, command, desired_state, observed_status, created_at, updated_at, spec, archive_key, pool, pool_version)
		VALUES (?, ?, ?, ?, ?, ?, 'PENDING', ?, ?, ?, ?, ?, ?)`
	_, err := tx.ExecContext(ctx, s.rebind(q), m.ID, m.Name, m.Owner, m.Image, m.Command, string(m.Desired), ms, ms, specJSON(m.Spec), archive, name, version)
	return err
}

// errNoMember ends a claim's transaction that found no member.
var errNoMember = errors.New("store: no pool member ready")

// Claim makes n (a create from a template, as the API filled it) out of a
// ready member of that template's pool at n's version, under n.Owner's
// quotas: one transaction holding the owner's lock (as CreateWithin) picks
// a member (Postgres: FOR UPDATE SKIP LOCKED, so concurrent claims on
// other replicas pass over it) and takes it with a compare-and-set on its
// pool column, giving it n's owner, name, spec (the given parameters) and
// desired state. ok is false, with no error, when no member is ready: the
// caller creates n cold. A quota or a taken name fails as CreateWithin's.
//
// With how.Restart, the claimed member's command is restarted in place
// (restart = 1: the reconciler stops it and starts it again with n's
// spec). With how.Adopt, the claimed member is marked as waiting for its provider to
// hand it to its new owner (provider.Adopter: Docker moves it to the
// owner's network) until Adopted: a crash between the two leaves it in
// PendingAdoptions, which the leader retries.
func (ps *Pools) Claim(ctx context.Context, n workspace.NewWorkspace, q auth.Quotas, how workspace.PoolClaim, now time.Time) (w workspace.Workspace, ok bool, err error) {
	s := ps.s
	if err := n.Validate(); err != nil {
		return w, false, err
	}
	ref := n.Spec.Template
	if ref == nil || n.ID != "" || n.ArchiveKey != "" {
		return w, false, nil
	}
	if s.dialect == SQLite && q == (auth.Quotas{}) {
		return ps.claimOne(ctx, n, how, now)
	}
	var id string
	err = s.withOwnerLock(ctx, n.Owner, func(tx *sql.Tx) error {
		if err := s.holdTemplate(ctx, tx, ref); err != nil {
			return err
		}
		if err := s.checkQuotas(ctx, tx, n, q); err != nil {
			return err
		}
		id, err = s.takeMember(ctx, tx, n, how, now)
		return err
	})
	switch {
	case errors.Is(err, errNoMember):
		return w, false, nil
	case err != nil && isUnique(err):
		return w, false, fmt.Errorf("%w: %q", workspace.ErrNameTaken, n.Name)
	case err != nil:
		return w, false, err
	}
	w, err = s.Get(ctx, id)
	return w, err == nil, err
}

// claimOne is Claim on SQLite with no quota to check: one statement,
// which the store's single writer runs between two statements of a bulk
// batch when it comes from a user's request (batch.go) instead of waiting,
// as a transaction of its own would, for the batch to end. (A template's
// delete drains its members in the transaction that deletes it, so a
// member still RUNNING is one of a template that exists.)
func (ps *Pools) claimOne(ctx context.Context, n workspace.NewWorkspace, how workspace.PoolClaim, now time.Time) (workspace.Workspace, bool, error) {
	s, ref := ps.s, n.Spec.Template
	take := claimSQL + `
		WHERE id = (SELECT id FROM workspaces WHERE pool = ? AND pool_version = ? AND ` + readyMember + ` ORDER BY id LIMIT 1)`
	k, err := s.exec(ctx, take, claimArgs(n, how, now, ref.Name, ref.Version)...)
	switch {
	case err != nil && isUnique(err):
		return workspace.Workspace{}, false, fmt.Errorf("%w: %q", workspace.ErrNameTaken, n.Name)
	case err != nil || k != 1:
		return workspace.Workspace{}, false, err
	}
	w, err := s.Lookup(ctx, n.Name, n.Owner)
	return w, err == nil, err
}

// checkQuotas checks n's owner's quotas for one more workspace (and one
// more RUNNING, if n asks for it).
func (s *Store) checkQuotas(ctx context.Context, tx *sql.Tx, n workspace.NewWorkspace, q auth.Quotas) error {
	if err := s.checkQuota(ctx, tx, n.Owner, "", q.Workspaces, "workspaces", `desired_state <> 'DELETED'`); err != nil {
		return err
	}
	if n.Desired != workspace.Running {
		return nil
	}
	return s.checkQuota(ctx, tx, n.Owner, "", q.Running, "running workspaces", `desired_state = 'RUNNING'`)
}

// takeMember picks a ready member of n's template version and makes it n:
// its id, or errNoMember.
func (s *Store) takeMember(ctx context.Context, tx *sql.Tx, n workspace.NewWorkspace, how workspace.PoolClaim, now time.Time) (string, error) {
	ref := n.Spec.Template
	pick := `SELECT id FROM workspaces WHERE pool = ? AND pool_version = ? AND ` + readyMember + ` ORDER BY id LIMIT 1`
	if s.dialect == Postgres {
		pick += ` FOR UPDATE SKIP LOCKED`
	}
	var id string
	if err := tx.QueryRowContext(ctx, s.rebind(pick), ref.Name, ref.Version).Scan(&id); errors.Is(err, sql.ErrNoRows) {
		return "", errNoMember
	} else if err != nil {
		return "", err
	}
	take := claimSQL + `
		WHERE id = ? AND pool = ? AND ` + readyMember
	res, err := tx.ExecContext(ctx, s.rebind(take), claimArgs(n, how, now, id, ref.Name)...)
	if err != nil {
		return "", err
	}
	if k, err := res.RowsAffected(); err != nil || k != 1 {
		return "", cmpErr(err, errNoMember)
	}
	return id, nil
}

// claimSQL makes a ready pool member the workspace a claim asks for
// (takeMember, claimOne: each adds the WHERE that picks the member). Its
// arguments, claimArgs, come before the WHERE's.
const claimSQL = `UPDATE workspaces SET pool = NULL, pool_version = ?, owner = ?, name = ?, spec = ?, desired_state = ?,
		created_at = ?, updated_at = ?, desired_version = desired_version + 1, last_activity_at = ?,
		error_count = 0, error_info = NULL, last_retry_at = NULL, next_retry_at = NULL, restart = ?`

// claimArgs are claimSQL's arguments for n claimed at now, then where's:
// pool_version is 0 (adoption pending) if how.Adopt, else NULL; restart is
// 1 if how.Restart.
func claimArgs(n workspace.NewWorkspace, how workspace.PoolClaim, now time.Time, where ...any) []any {
	ms := now.UnixMilli()
	set := []any{sql.NullInt64{Valid: how.Adopt}, n.Owner, n.Name, specJSON(n.Spec), string(n.Desired), ms, ms, ms, boolInt(how.Restart)}
	return append(set, where...)
}

// cmpErr is err, or otherwise if err is nil.
func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// queryIDs runs q (… RETURNING id) in tx and collects the ids.
func queryIDs(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return scanIDs(rows)
}

// Adoption is a claimed member its provider has yet to hand to Owner,
// claimed at Claimed.
type Adoption struct {
	ID, Owner string
	Claimed   time.Time
}

// PendingAdoptions lists the claimed members whose adoption was not
// recorded done (Claim with how.Adopt).
func (ps *Pools) PendingAdoptions(ctx context.Context) ([]Adoption, error) {
	rows, err := ps.s.db.QueryContext(ctx, `SELECT id, owner, created_at FROM workspaces WHERE pool IS NULL AND pool_version IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Adoption
	for rows.Next() {
		var a Adoption
		var ms int64
		if err := rows.Scan(&a.ID, &a.Owner, &ms); err != nil {
			return nil, err
		}
		a.Claimed = time.UnixMilli(ms)
		out = append(out, a)
	}
	return out, rows.Err()
}

// Adopted records that claimed member id was handed to its owner.
func (ps *Pools) Adopted(ctx context.Context, id string) error {
	_, err := ps.s.exec(ctx, `UPDATE workspaces SET pool_version = NULL WHERE id = ? AND pool IS NULL`, id)
	return err
}
