package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations
var migrationsFS embed.FS

// migrate applies the dialect's numbered migrations up to version upTo
// that the database has not seen yet, each in its own transaction.
func (s *Store) migrate(ctx context.Context, upTo int) error {
	dir := "migrations/" + s.dialect.String()
	entries, err := fs.ReadDir(migrationsFS, dir)
	if err != nil {
		return err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	for _, e := range entries {
		v, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("workspace: migration %s: name must start with a number", e.Name())
		}
		if v > upTo {
			break
		}
		body, err := fs.ReadFile(migrationsFS, dir+"/"+e.Name())
		if err != nil {
			return err
		}
		if err := s.applyMigration(ctx, v, string(body)); err != nil {
			return fmt.Errorf("workspace: migration %s: %w", e.Name(), err)
		}
	}
	return nil
}

func (s *Store) applyMigration(ctx context.Context, version int, body string) error {
	release, err := s.takeTurn(ctx)
	if err != nil {
		return err
	}
	defer release()
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE on SQLite (_txlock), in the turn (turn.go)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if s.dialect == Postgres {
		// Replicas starting together: one migrates, the others wait.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7474001)`); err != nil {
			return err
		}
	}
	var n int
	if err := tx.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	for _, stmt := range strings.Split(stripComments(body), ";") { // comments first: a ; in one would split a statement
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`), version, time.Now().UnixMilli()); err != nil {
		return err
	}
	return tx.Commit()
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
