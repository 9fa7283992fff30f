package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/auth"
)

// Accounts is the accounts tables (migration 0200): API tokens, page
// sessions and the audit log. It shares its Store's connections and
// batcher (Store.Accounts); the owners table is the workspaces' quota lock
// (withOwnerLock, below).
type Accounts struct{ s *Store }

// Accounts keeps the authenticator's tokens and sessions.
var _ auth.Store = (*Accounts)(nil)

// Accounts is s's tokens, page sessions and audit log.
func (s *Store) Accounts() *Accounts { return &Accounts{s: s} }

// withOwnerLock runs fn in a transaction that holds owner's lock: on
// Postgres the owners row, locked FOR UPDATE, so replicas admitting the same
// owner take turns (each statement after the lock sees what the previous
// holder committed); on SQLite the transaction is BEGIN IMMEDIATE in the
// store's turn (turn.go), which already serializes every writer.
func (s *Store) withOwnerLock(ctx context.Context, owner string, fn func(*sql.Tx) error) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		if s.dialect == Postgres {
			if _, err := tx.ExecContext(ctx, `INSERT INTO owners (owner) VALUES ($1) ON CONFLICT DO NOTHING`, owner); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `SELECT owner FROM owners WHERE owner = $1 FOR UPDATE`, owner); err != nil {
				return err
			}
		}
		return fn(tx)
	})
}

// checkQuota fails with *auth.QuotaError if owner already has limit rows
// matching cond (other than except). limit <= 0 is no limit.
func (s *Store) checkQuota(ctx context.Context, tx *sql.Tx, owner, except string, limit int, what, cond string) error {
	if limit <= 0 {
		return nil
	}
	var n int
	q := `SELECT COUNT(*) FROM workspaces WHERE owner = ? AND id <> ? AND ` + cond
	if err := tx.QueryRowContext(ctx, s.rebind(q), owner, except).Scan(&n); err != nil {
		return err
	}
	if n >= limit {
		return &auth.QuotaError{Owner: owner, What: what, Limit: limit, Count: n}
	}
	return nil
}

const tokenCols = `id, owner, admin, hash, created_at, last_used_at, expires_at, revoked_at`

func scanToken(r scanner) (auth.Token, error) {
	var t auth.Token
	var admin int
	var created int64
	var used, expires, revoked sql.NullInt64
	if err := r.Scan(&t.ID, &t.Owner, &admin, &t.Hash, &created, &used, &expires, &revoked); err != nil {
		return t, err
	}
	t.Admin = admin != 0
	t.CreatedAt = time.UnixMilli(created).UTC()
	t.LastUsed, t.ExpiresAt, t.RevokedAt = msTime(used), msTime(expires), msTime(revoked)
	return t, nil
}

func msTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

func nullMS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// CreateToken stores t (its hash, never a secret).
func (a *Accounts) CreateToken(ctx context.Context, t auth.Token) error {
	if err := auth.ValidOwner(t.Owner); err != nil {
		return fmt.Errorf("%w: %v", workspace.ErrBadInput, err)
	}
	_, err := a.s.exec(ctx, `INSERT INTO tokens (`+tokenCols+`) VALUES (?, ?, ?, ?, ?, NULL, ?, NULL)`,
		t.ID, t.Owner, boolInt(t.Admin), t.Hash, t.CreatedAt.UnixMilli(), nullMS(t.ExpiresAt))
	return err
}

// Token reads one token by its public id.
func (a *Accounts) Token(ctx context.Context, id string) (auth.Token, bool, error) {
	t, err := scanToken(a.s.db.QueryRowContext(ctx, a.s.rebind(`SELECT `+tokenCols+` FROM tokens WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return t, false, nil
	}
	return t, err == nil, err
}

// Tokens lists every token, oldest first.
func (a *Accounts) Tokens(ctx context.Context) ([]auth.Token, error) {
	rows, err := a.s.db.QueryContext(ctx, `SELECT `+tokenCols+` FROM tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []auth.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// TokenUsed records a token's last use.
func (a *Accounts) TokenUsed(ctx context.Context, id string, at time.Time) error {
	_, err := a.s.exec(ctx, `UPDATE tokens SET last_used_at = ? WHERE id = ?`, at.UnixMilli(), id)
	return err
}

// RevokeToken revokes id and ends its page sessions; false if there is no
// such token. Revoking twice keeps the first time.
func (a *Accounts) RevokeToken(ctx context.Context, id string, now time.Time) (bool, error) {
	if _, found, err := a.Token(ctx, id); err != nil || !found {
		return false, err
	}
	if _, err := a.s.exec(ctx, `UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, now.UnixMilli(), id); err != nil {
		return false, err
	}
	_, err := a.s.exec(ctx, `DELETE FROM sessions WHERE token_id = ?`, id)
	return true, err
}

// HasUsableAdmin reports whether some admin token is neither revoked nor
// expired at now.
func (a *Accounts) HasUsableAdmin(ctx context.Context, now time.Time) (bool, error) {
	var n int
	err := a.s.db.QueryRowContext(ctx, a.s.rebind(`SELECT COUNT(*) FROM tokens WHERE admin = 1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)`), now.UnixMilli()).Scan(&n)
	return n > 0, err
}

// CreateSession stores a page session (its hash).
func (a *Accounts) CreateSession(ctx context.Context, se auth.Session) error {
	_, err := a.s.exec(ctx, `INSERT INTO sessions (id, token_id, hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
		se.ID, se.TokenID, se.Hash, se.CreatedAt.UnixMilli(), se.ExpiresAt.UnixMilli())
	return err
}

// Session reads one page session by its public id.
func (a *Accounts) Session(ctx context.Context, id string) (auth.Session, bool, error) {
	var se auth.Session
	var created, expires int64
	err := a.s.db.QueryRowContext(ctx, a.s.rebind(`SELECT id, token_id, hash, created_at, expires_at FROM sessions WHERE id = ?`), id).
		Scan(&se.ID, &se.TokenID, &se.Hash, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return se, false, nil
	}
	se.CreatedAt, se.ExpiresAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC()
	return se, err == nil, err
}

// DeleteSession ends a page session (logout).
func (a *Accounts) DeleteSession(ctx context.Context, id string) error {
	_, err := a.s.exec(ctx, `DELETE FROM sessions WHERE id = ?`, id)
	return err
}

// RecordAudit appends one audit row.
func (a *Accounts) RecordAudit(ctx context.Context, e auth.AuditEntry) error {
	_, err := a.s.exec(ctx, `INSERT INTO audit (at, token_id, owner, action, workspace_id, status, remote, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		e.At.UnixMilli(), e.TokenID, e.Owner, e.Action, clip(e.Workspace, 128), e.Status, e.Remote, clip(e.Detail, 512))
	return err
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Audit reads audit rows matching f, oldest first (the newest f.Limit,
// default 1000).
func (a *Accounts) Audit(ctx context.Context, f auth.AuditFilter) ([]auth.AuditEntry, error) {
	var where []string
	var args []any
	if f.Workspace != "" {
		where, args = append(where, "workspace_id = ?"), append(args, f.Workspace)
	}
	if f.Owner != "" {
		where, args = append(where, "owner = ?"), append(args, f.Owner)
	}
	if !f.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, f.Since.UnixMilli())
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	q := `SELECT id, at, token_id, owner, action, workspace_id, status, remote, detail FROM audit`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(` ORDER BY id DESC LIMIT %d`, limit)
	rows, err := a.s.db.QueryContext(ctx, a.s.rebind(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []auth.AuditEntry
	for rows.Next() {
		var e auth.AuditEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.TokenID, &e.Owner, &e.Action, &e.Workspace, &e.Status, &e.Remote, &e.Detail); err != nil {
			return nil, err
		}
		e.At = time.UnixMilli(at).UTC()
		out = append(out, e)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, rows.Err()
}

// Prune removes audit rows older than before and page sessions
// expired at now; the leader calls it.
func (a *Accounts) Prune(ctx context.Context, before, now time.Time) (int64, error) {
	n, err := a.s.exec(ctx, `DELETE FROM audit WHERE at < ?`, before.UnixMilli())
	if err != nil {
		return n, err
	}
	_, err = a.s.exec(ctx, `DELETE FROM sessions WHERE expires_at <= ?`, now.UnixMilli())
	return n, err
}
