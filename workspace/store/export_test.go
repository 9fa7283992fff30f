package store

import "context"

// SetBeforeBulk makes s's writer call f before each bulk statement on
// SQLite and each bulk batch on Postgres.
func SetBeforeBulk(s *Store, f func()) { s.batch.beforeBulk.Store(&f) }

// WriteLoops is how many write loops s's batcher runs.
func WriteLoops(s *Store) int { return s.batch.loops }

// Exec runs one write with ? placeholders through s's batcher, as the
// named writes do.
func Exec(ctx context.Context, s *Store, q string, args ...any) (int64, error) {
	return s.exec(ctx, q, args...)
}

// SetAfterSetDesired makes s's SetDesiredOf call f between its write and
// its read back.
func SetAfterSetDesired(s *Store, f func(id string)) { s.afterSetDesired.Store(&f) }
