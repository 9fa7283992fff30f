-- 0100 (TTL manager): the desired state's version and the last
-- user activity. desired_version is bumped by every API write of
-- desired_state and by every touch. The TTL manager writes desired_state only
-- with a compare-and-set on the version it read, so a user request that lands
-- between its read and its write always wins.
ALTER TABLE workspaces ADD COLUMN desired_version BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workspaces ADD COLUMN last_activity_at BIGINT
