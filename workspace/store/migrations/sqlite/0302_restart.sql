-- 0302 (restart in place): restart = 1 asks the reconciler to stop a
-- RUNNING workspace that should be RUNNING and start it again, so that
-- its command runs with the spec it has now (a warm pool member claimed
-- with parameters that change only its env). Any operation's claim sets
-- it back to 0. Such a row is actionable: the index's predicate is the
-- store's (store.go, actionable), so the reconciler's sweep finds it.
ALTER TABLE workspaces ADD COLUMN restart INTEGER NOT NULL DEFAULT 0;
DROP INDEX workspaces_actionable;
CREATE INDEX workspaces_actionable ON workspaces (id)
    WHERE operation <> 'NONE' OR (desired_state <> observed_status AND (observed_status <> 'ERROR' OR desired_state = 'DELETED'))
       OR (restart = 1 AND observed_status = 'RUNNING' AND desired_state = 'RUNNING');
