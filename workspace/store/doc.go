// Package store is the only package that speaks SQL on the workspace
// tables: SQLite (default, one file) or Postgres (shared by replicas), the
// embedded migrations, and the batching that turns many concurrent callers
// into few round trips.
//
// Every write that races another writer is one conditional UPDATE (a
// compare-and-set), so the same code is correct on one SQLite file and on
// a Postgres shared by replicas. Callers pass times in (their clock); times
// are stored as Unix milliseconds.
//
// It is storage only: what the components of one process share besides
// the database (the rows they hand each other, package handoff; the count
// of a user's work in flight, urgency.Gate) lives apart and is given to
// them by the server, and tests reach the database beside a Store through
// connections of their own (storetest), never through it.
//
// Tour:
//
//	migrate.go  the numbered migrations/ of each dialect, each applied once
//	store.go    Open, OpenWith (Options) and the dialects, the row scan,
//	            Create, Get, List, ListActionable(IDs), SetDesired, and the
//	            reconciler's writes: Claim,
//	            Acquire, Renew, Executed, SetArchiveKey, Failed, Terminal,
//	            Complete, DeleteRow; SetObserved, SetObservedComplete (an
//	            observation that ends the executed operation) and Recover
//	states.go   States, ListStates: every workspace's state without its
//	            spec (the live hub's resync, the monitor's pass)
//	monitor.go  the HealthMonitor's error-info writes (SetObserveError,
//	            ClearObserveError), which never touch the reconciler's
//	ttl.go      the TTL manager's reads and its one write (SetDesiredIfVersion,
//	            also through the leader's connection: FencedBy), Touch,
//	            MarkDeleted, LeaderLockID
//	batch.go    the batcher: on SQLite one BEGIN IMMEDIATE … COMMIT per batch
//	            on the single writer, on Postgres one pipelined round trip;
//	            reads by id as one SELECT … IN (…); statements under a
//	            marked context (urgency.Mark: a user's request) go ahead of
//	            the batches
//	turn.go     the write turn: on SQLite this process's write
//	            transactions queue for it instead of polling the file's
//	            lock (busy_timeout), which can starve a waiter under load
//	urgent.go   Gate (Options.Gate: the server's urgency.Gate): while a
//	            user's change is in flight the bulk batches wait for it
//	            (bounded)
//	pgmany.go   on Postgres, the statements of one shape in a batch as one
//	            UPDATE … FROM unnest, each row keeping its compare-and-set
//	auth.go     Accounts (Store.Accounts): tokens, page sessions and the
//	            audit log, on the store's connections; the owners' lock the
//	            quota checks hold
//	supersede.go Abandon: the reconciler giving up a superseded operation
//	pools.go    Pools (Store.Pools): warm pools' sizes, Refill (drain, trim,
//	            add members under the pool's lock), Status; Claim, a
//	            create served by a ready member (compare-and-set)
//	templates.go Templates (Store.Templates): template versions (Put, Get,
//	            List, Versions, Latest), Delete refused while a workspace
//	            uses one; the hold a create from a template takes
//
// Subpackages: memstore is the in-memory fake with the same conditions,
// storetest the test support (fresh databases; Force, Exec and DB on
// connections of their own).
package store
