-- 0202: a workspace's environment and resource limits (wstype.Spec) as JSON;
-- '' for the workspaces made before, which have neither.
ALTER TABLE workspaces ADD COLUMN spec TEXT NOT NULL DEFAULT ''
