-- 0201: names are unique per owner only since 0200, and lookups by name
-- alone (an admin's, the event hub's) keep an index.
CREATE INDEX workspaces_name ON workspaces (name)
