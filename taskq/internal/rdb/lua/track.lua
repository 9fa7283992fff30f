-- track: one step of the scan that makes a queue written by an earlier
-- release trust its extras set (lib.lua extras): HSCAN of the tasks hash,
-- about 1,000 fields a step, matching only field names with a '|' (no
-- message is copied into the script but that of a task whose id holds
-- one), each task found joining the set (its id: the name up to its last
-- '|'; ids may hold a '|', no suffix does; a value with a head is a task's
-- own).
-- KEYS: the queue's 21 keys. ARGV: the scan's cursor ('0' to begin), the
-- run_id of the server the scan began on ('' to begin)
-- Returns {next cursor, run_id of this server}; the cursor is '0' once
-- the scan is over and state's xt is set ({'0', ''} for a queue tracked
-- already: no INFO read).
-- Guarantees: a scan from '0' to '0' on one server (a cursor means nothing
-- to another: a restarted or promoted one lays the hash out anew, and may
-- lack the steps' writes; the scan then begins again) sets xt with every
-- task that had an extra field throughout it in the set: a field written
-- meanwhile was added by its writer (extra), and one deleted meanwhile
-- needs nothing. Idempotent; a tracked queue returns '0' at once. (A task
-- of the release before the heads, its value the bare message and its id
-- holding a '|', or a group's g:<key>|t, adds a name that is no task: never
-- read, never removed.)
if extras_tracked(0) then return {'0', ''} end
local rid = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local cursor = ARGV[1]
if ARGV[2] ~= rid then cursor = '0' end
local r = redis.call('HSCAN', KEYS[4], cursor, 'MATCH', '*|*', 'COUNT', 1000)
local fs = r[2]
for i = 1, #fs, 2 do
  local id = string.byte(fs[i + 1], 1) ~= 1 and string.match(fs[i], '^(.*)|[^|]*$')
  if id then redis.call('SADD', KEYS[21], id) end
end
if r[1] == '0' then redis.call('HSET', KEYS[3], 'xt', 1) end
return {r[1], rid}
