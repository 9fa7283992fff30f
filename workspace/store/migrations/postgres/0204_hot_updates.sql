-- 0204: reconcile writes stay heap-only (HOT). When an UPDATE changes a
-- column that any index of the table covers, its predicate included,
-- Postgres adds an entry to every index for the new row version. The
-- actionable index's predicate reads operation and both statuses, which
-- five of a workspace's seven writes change: without it all seven are HOT
-- (fillfactor 80 leaves the room, 0203), and 100,000 workspaces converged
-- in 0.75x the time. The reconciler's tick now reads the table in one
-- sequential scan: 3.6 ms over 10,000 converged workspaces, once per
-- interval. SQLite keeps its index (no HOT there; its index costs little).
DROP INDEX workspaces_actionable
