-- 0200 (accounts): every workspace has an owner, and names are unique per
-- owner. Workspaces made before owners existed belong to 'admin'.
ALTER TABLE workspaces ADD COLUMN owner TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE workspaces DROP CONSTRAINT IF EXISTS workspaces_name_key;
CREATE UNIQUE INDEX workspaces_owner_name ON workspaces (owner, name);
-- API tokens: only the SHA-256 of the secret is kept (auth.HashSecret).
CREATE TABLE tokens (
    id           TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    admin        INTEGER NOT NULL DEFAULT 0,
    hash         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    last_used_at BIGINT,
    expires_at   BIGINT,
    revoked_at   BIGINT
);
-- Page logins, bound to the token that made them.
CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    token_id   TEXT NOT NULL,
    hash       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_token ON sessions (token_id);
-- One row per owner: a quota check locks it (SELECT … FOR UPDATE), so two
-- replicas admitting the same owner's requests take turns.
CREATE TABLE owners (owner TEXT PRIMARY KEY);
-- Every mutating request, accepted or refused.
CREATE TABLE audit (
    id           BIGSERIAL PRIMARY KEY,
    at           BIGINT NOT NULL,
    token_id     TEXT NOT NULL DEFAULT '',
    owner        TEXT NOT NULL DEFAULT '',
    action       TEXT NOT NULL,
    workspace_id TEXT NOT NULL DEFAULT '',
    status       INTEGER NOT NULL,
    remote       TEXT NOT NULL DEFAULT '',
    detail       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_at ON audit (at)
