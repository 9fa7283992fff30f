-- 0301 (warm pools): a template's pool size (template_pools), and the
-- workspaces that are its unclaimed members: pool names the template,
-- pool_version the version each was made from (NULL on every other
-- workspace, and on a member once claimed; a claimed member whose
-- provider has yet to hand it to its owner keeps pool_version 0 until
-- then: store.Pools.Adopted). The indexes cover only those rows, and no
-- reconcile write changes either column (Postgres: the writes stay
-- heap-only, 0204).
CREATE TABLE template_pools (
    name       TEXT PRIMARY KEY,
    size       INTEGER NOT NULL,
    updated_at BIGINT NOT NULL
);
ALTER TABLE workspaces ADD COLUMN pool TEXT;
ALTER TABLE workspaces ADD COLUMN pool_version INTEGER;
CREATE INDEX workspaces_pool ON workspaces (pool, pool_version) WHERE pool IS NOT NULL;
CREATE INDEX workspaces_adopt ON workspaces (id) WHERE pool IS NULL AND pool_version IS NOT NULL
