package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gantryhq/gantry/workspace"
)

// Templates is the templates table (migration 0300): workspace.Template
// versions, each written once. It shares its Store's connections
// (Store.Templates). A workspace names its template in its spec
// (Spec.Template); creating one from a template and deleting that
// template are serialized (CreateFromTemplate, Delete), so no workspace is
// ever left naming a template that is gone.
type Templates struct{ s *Store }

// Templates is s's templates.
func (s *Store) Templates() *Templates { return &Templates{s: s} }

// Put writes t as a new version of its name and returns it: version 1 if
// the name is new (first: a create, refused with ErrNameTaken if it
// exists), the latest + 1 otherwise (an update, ErrNotFound if the name
// does not exist). Two concurrent puts of one name both land, one after
// the other.
func (ts *Templates) Put(ctx context.Context, t workspace.Template, first bool, now time.Time) (workspace.Template, error) {
	if err := t.Validate(); err != nil {
		return t, err
	}
	for range 10 {
		latest, err := ts.latestVersion(ctx, t.Name)
		switch {
		case err != nil:
			return t, err
		case first && latest > 0:
			return t, fmt.Errorf("%w: template %q (update it instead)", workspace.ErrNameTaken, t.Name)
		case !first && latest == 0:
			return t, fmt.Errorf("%w: template %q", workspace.ErrNotFound, t.Name)
		}
		t.Version, t.Created, t.Latest = latest+1, now.UTC().Truncate(time.Millisecond), 0
		body, _ := json.Marshal(t)
		_, err = ts.s.exec(ctx, `INSERT INTO templates (name, version, body, created_at) VALUES (?, ?, ?, ?)`,
			t.Name, t.Version, string(body), now.UnixMilli())
		if err == nil || !isUnique(err) {
			return t, err
		}
	}
	return t, fmt.Errorf("%w: template %q changed under ten updates in a row; try again", workspace.ErrConflict, t.Name)
}

func (ts *Templates) latestVersion(ctx context.Context, name string) (int, error) {
	var v sql.NullInt64
	err := ts.s.db.QueryRowContext(ctx, ts.s.rebind(`SELECT MAX(version) FROM templates WHERE name = ?`), name).Scan(&v)
	return int(v.Int64), err
}

// Get reads version of template name (0 = the latest), with Latest set.
func (ts *Templates) Get(ctx context.Context, name string, version int) (workspace.Template, error) {
	latest, err := ts.latestVersion(ctx, name)
	if err != nil {
		return workspace.Template{}, err
	}
	if version == 0 {
		version = latest
	}
	var body string
	err = ts.s.db.QueryRowContext(ctx, ts.s.rebind(`SELECT body FROM templates WHERE name = ? AND version = ?`), name, version).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		if latest == 0 {
			return workspace.Template{}, fmt.Errorf("%w: template %q", workspace.ErrNotFound, name)
		}
		return workspace.Template{}, fmt.Errorf("%w: template %q has no version %d (latest %d)", workspace.ErrNotFound, name, version, latest)
	}
	if err != nil {
		return workspace.Template{}, err
	}
	t, err := decodeTemplate(body)
	t.Latest = latest
	return t, err
}

func decodeTemplate(body string) (workspace.Template, error) {
	var t workspace.Template
	if err := json.Unmarshal([]byte(body), &t); err != nil {
		return t, fmt.Errorf("template: stored body: %w", err)
	}
	return t, nil
}

// List is the latest version of every template, by name.
func (ts *Templates) List(ctx context.Context) ([]workspace.Template, error) {
	return ts.list(ctx, `SELECT t.body FROM templates t
		JOIN (SELECT name, MAX(version) AS v FROM templates GROUP BY name) l ON t.name = l.name AND t.version = l.v
		ORDER BY t.name`)
}

// Versions is every version of template name, newest first.
func (ts *Templates) Versions(ctx context.Context, name string) ([]workspace.Template, error) {
	all, err := ts.list(ctx, `SELECT body FROM templates WHERE name = ? ORDER BY version DESC`, name)
	if err == nil && len(all) == 0 {
		err = fmt.Errorf("%w: template %q", workspace.ErrNotFound, name)
	}
	return all, err
}

func (ts *Templates) list(ctx context.Context, q string, args ...any) ([]workspace.Template, error) {
	rows, err := ts.s.db.QueryContext(ctx, ts.s.rebind(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []workspace.Template{}
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		t, err := decodeTemplate(body)
		if err != nil {
			return nil, err
		}
		t.Latest = t.Version
		out = append(out, t)
	}
	return out, rows.Err()
}

// Latest is the latest version of each template name.
func (ts *Templates) Latest(ctx context.Context) (map[string]int, error) {
	rows, err := ts.s.db.QueryContext(ctx, `SELECT name, MAX(version) FROM templates GROUP BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var name string
		var v int
		if err := rows.Scan(&name, &v); err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, rows.Err()
}

// usesTemplate matches the spec column of a workspace made from template
// name: the spec is json.Marshal's (specJSON), whose strings escape every
// '"', so the text `"template":{"name":"N",` can only be the reference.
// Names hold no LIKE wildcard but '_', escaped.
func usesTemplate(name string) string {
	return `%"template":{"name":"` + strings.ReplaceAll(name, "_", `\_`) + `",%`
}

const usesTemplateSQL = `SELECT COUNT(*) FROM workspaces WHERE desired_state <> 'DELETED' AND pool IS NULL AND spec LIKE ? ESCAPE '\'`

// Delete removes every version of template name: ErrNotFound if it has
// none, ErrConflict naming the count while a workspace (not being
// deleted, not an unclaimed member of its warm pool) was made from it. It
// drops the template's pool and deletes its unclaimed members. The check and the delete are one
// transaction that locks the template's rows; a create from it
// (CreateFromTemplate) takes the same lock, so the two take turns.
func (ts *Templates) Delete(ctx context.Context, name string) error {
	s := ts.s
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
	lock := `SELECT COUNT(*) FROM templates WHERE name = ?`
	if s.dialect == Postgres {
		lock = `SELECT COUNT(*) FROM (SELECT version FROM templates WHERE name = $1 FOR UPDATE) v`
	}
	var versions, users int
	if err := tx.QueryRowContext(ctx, s.rebind(lock), name).Scan(&versions); err != nil {
		return err
	}
	if versions == 0 {
		return fmt.Errorf("%w: template %q", workspace.ErrNotFound, name)
	}
	if err := tx.QueryRowContext(ctx, s.rebind(usesTemplateSQL), usesTemplate(name)).Scan(&users); err != nil {
		return err
	}
	if users > 0 {
		return fmt.Errorf("%w: template %q is used by %d workspace(s); delete them or move them off it first", workspace.ErrConflict, name, users)
	}
	for _, q := range []string{
		`DELETE FROM templates WHERE name = ?`,
		`DELETE FROM template_pools WHERE name = ?`,
		`UPDATE workspaces SET desired_state = 'DELETED', desired_version = desired_version + 1 WHERE pool = ? AND desired_state <> 'DELETED'`,
	} {
		if _, err := tx.ExecContext(ctx, s.rebind(q), name); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// InUse is how many workspaces (not being deleted, not unclaimed pool
// members) were made from template name.
func (ts *Templates) InUse(ctx context.Context, name string) (int, error) {
	var n int
	err := ts.s.db.QueryRowContext(ctx, ts.s.rebind(usesTemplateSQL), usesTemplate(name)).Scan(&n)
	return n, err
}

// holdTemplate, inside a create's transaction, checks that the template
// version n names exists and, on Postgres, holds its row (FOR SHARE) until
// the transaction ends, so a Delete of it waits and then sees the new
// workspace.
func (s *Store) holdTemplate(ctx context.Context, tx *sql.Tx, ref *workspace.TemplateRef) error {
	q := `SELECT COUNT(*) FROM templates WHERE name = ? AND version = ?`
	if s.dialect == Postgres {
		q = `SELECT COUNT(*) FROM (SELECT version FROM templates WHERE name = $1 AND version = $2 FOR SHARE) v`
	}
	var n int
	if err := tx.QueryRowContext(ctx, s.rebind(q), ref.Name, ref.Version).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: template %q version %d", workspace.ErrNotFound, ref.Name, ref.Version)
	}
	return nil
}
