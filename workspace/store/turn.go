package store

import (
	"context"
	"database/sql"
)

// SQLite has one writer per file, and a transaction that finds the file
// locked polls for it (busy_timeout) in growing sleeps, up to 100 ms
// apart: under load a waiter can lose every poll to newcomers for the
// whole timeout and fail with SQLITE_BUSY though each holder was quick.
// So this process's write transactions on SQLite first take the store's
// turn, handed over first come first served; the file's own lock then
// only arbitrates between processes (the CLI's migrate, a second server
// pointed at the same file).

// newTurn is the turn of a store of dialect d: nil (none needed) on
// Postgres, whose row locks queue their waiters.
func newTurn(d Dialect) chan struct{} {
	if d != SQLite {
		return nil
	}
	return make(chan struct{}, 1)
}

// takeTurn waits for s's write turn (or ctx's end) and returns its
// release.
func (s *Store) takeTurn(ctx context.Context) (release func(), err error) {
	if s.turn == nil {
		return func() {}, nil
	}
	select {
	case s.turn <- struct{}{}:
		return func() { <-s.turn }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// writeTx runs fn in a write transaction (BEGIN IMMEDIATE on SQLite) in
// s's turn and commits it if fn succeeds.
func (s *Store) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	release, err := s.takeTurn(ctx)
	if err != nil {
		return err
	}
	defer release()
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE on SQLite (_txlock)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
