-- 0001: the seed's workspaces table (seed 001 columns + identity, spec, lease).
-- Times are Unix milliseconds so both dialects compare them the same way.
CREATE TABLE workspaces (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    image           TEXT NOT NULL DEFAULT '',
    command         TEXT NOT NULL DEFAULT '',
    desired_state   TEXT NOT NULL,
    observed_status TEXT NOT NULL DEFAULT 'PENDING',
    observed_at     BIGINT,
    operation       TEXT NOT NULL DEFAULT 'NONE',
    op_id           TEXT,
    op_started_at   BIGINT,
    op_owner        TEXT,
    op_lease_until  BIGINT,
    op_executed     INTEGER NOT NULL DEFAULT 0,
    archive_key     TEXT,
    error_count     INTEGER NOT NULL DEFAULT 0,
    error_info      TEXT,
    previous_status TEXT,
    last_retry_at   BIGINT,
    next_retry_at   BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
-- The reconciler's tick reads only rows with work: a converged fleet costs
-- one index scan over nothing.
CREATE INDEX workspaces_actionable ON workspaces (id)
    WHERE operation <> 'NONE' OR (desired_state <> observed_status AND (observed_status <> 'ERROR' OR desired_state = 'DELETED'));
