-- 0203: ids, owners and names compare byte by byte (COLLATE "C"), and rows
-- leave room for HOT updates.
--
-- Every write of the reconciler and the monitor finds its row by id, and
-- every update that changes operation or a status (the actionable index's
-- predicate) adds an entry to each of the table's indexes. Under a
-- database's locale (en_US.UTF-8, even C.UTF-8) each of those index
-- comparisons went through strcoll: a large share of the server's time
-- while 100,000 workspaces converged. Ids are UUIDs and names and owners are
-- identifiers, so byte order is the only order they need; listings keep
-- their order where the locale agreed with byte order (C.UTF-8) and sort
-- upper case first otherwise.
--
-- fillfactor 80 leaves a fifth of each new page free, so that the writes
-- that touch no indexed column (executed, lease renewals, retries) can
-- stay on their page as heap-only tuples instead of adding index entries.
ALTER TABLE workspaces
    ALTER COLUMN id TYPE TEXT COLLATE "C",
    ALTER COLUMN owner TYPE TEXT COLLATE "C",
    ALTER COLUMN name TYPE TEXT COLLATE "C";
ALTER TABLE workspaces SET (fillfactor = 80)
