-- 0302 (restart in place): restart = 1 asks the reconciler to stop a
-- RUNNING workspace that should be RUNNING and start it again, so that
-- its command runs with the spec it has now (a warm pool member claimed
-- with parameters that change only its env). Any operation's claim sets
-- it back to 0. No index covers it (0204: the reconcile writes stay
-- heap-only).
ALTER TABLE workspaces ADD COLUMN restart INTEGER NOT NULL DEFAULT 0;
