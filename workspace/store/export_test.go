package store

import "time"

// SetMaxYield sets how long s's bulk batches wait for urgent work in
// flight (maxYield).
func SetMaxYield(s *Store, d time.Duration) { s.urgent.maxYield.Store(int64(d)) }

// SetBeforeBulk makes s's writer call f before each bulk statement on
// SQLite and each bulk batch on Postgres.
func SetBeforeBulk(s *Store, f func()) { s.batch.beforeBulk.Store(&f) }

// WriteLoops is how many write loops s's batcher runs.
func WriteLoops(s *Store) int { return s.batch.loops }
