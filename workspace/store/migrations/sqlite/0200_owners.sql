-- 0200 (accounts): every workspace has an owner, and names are unique per
-- owner. Workspaces made before owners existed belong to 'admin'. SQLite
-- cannot drop the old UNIQUE (name), so the table is rebuilt (inside the
-- migration's transaction).
CREATE TABLE workspaces_new (
    id               TEXT PRIMARY KEY,
    name             TEXT NOT NULL,
    owner            TEXT NOT NULL DEFAULT 'admin',
    image            TEXT NOT NULL DEFAULT '',
    command          TEXT NOT NULL DEFAULT '',
    desired_state    TEXT NOT NULL,
    observed_status  TEXT NOT NULL DEFAULT 'PENDING',
    observed_at      INTEGER,
    operation        TEXT NOT NULL DEFAULT 'NONE',
    op_id            TEXT,
    op_started_at    INTEGER,
    op_owner         TEXT,
    op_lease_until   INTEGER,
    op_executed      INTEGER NOT NULL DEFAULT 0,
    archive_key      TEXT,
    error_count      INTEGER NOT NULL DEFAULT 0,
    error_info       TEXT,
    previous_status  TEXT,
    last_retry_at    INTEGER,
    next_retry_at    INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    desired_version  BIGINT NOT NULL DEFAULT 0,
    last_activity_at BIGINT,
    UNIQUE (owner, name)
);
INSERT INTO workspaces_new (id, name, owner, image, command, desired_state, observed_status, observed_at, operation, op_id,
    op_started_at, op_owner, op_lease_until, op_executed, archive_key, error_count, error_info, previous_status,
    last_retry_at, next_retry_at, created_at, updated_at, desired_version, last_activity_at)
SELECT id, name, 'admin', image, command, desired_state, observed_status, observed_at, operation, op_id,
    op_started_at, op_owner, op_lease_until, op_executed, archive_key, error_count, error_info, previous_status,
    last_retry_at, next_retry_at, created_at, updated_at, desired_version, last_activity_at FROM workspaces;
DROP TABLE workspaces;
ALTER TABLE workspaces_new RENAME TO workspaces;
CREATE INDEX workspaces_actionable ON workspaces (id)
    WHERE operation <> 'NONE' OR (desired_state <> observed_status AND (observed_status <> 'ERROR' OR desired_state = 'DELETED'));
-- API tokens: only the SHA-256 of the secret is kept (auth.HashSecret).
CREATE TABLE tokens (
    id           TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    admin        INTEGER NOT NULL DEFAULT 0,
    hash         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    expires_at   INTEGER,
    revoked_at   INTEGER
);
-- Page logins, bound to the token that made them.
CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    token_id   TEXT NOT NULL,
    hash       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX sessions_token ON sessions (token_id);
-- One row per owner: the row a quota check locks on Postgres.
CREATE TABLE owners (owner TEXT PRIMARY KEY);
-- Every mutating request, accepted or refused.
CREATE TABLE audit (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    at           INTEGER NOT NULL,
    token_id     TEXT NOT NULL DEFAULT '',
    owner        TEXT NOT NULL DEFAULT '',
    action       TEXT NOT NULL,
    workspace_id TEXT NOT NULL DEFAULT '',
    status       INTEGER NOT NULL,
    remote       TEXT NOT NULL DEFAULT '',
    detail       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_at ON audit (at)
