-- track: one step of the scan that makes a queue written by an earlier
-- release trust its extras set (lib.lua extras): HSCAN of the tasks hash,
-- about 1,000 fields a step, matching only field names with a '|' (so no
-- task's message is copied into the script), each task found joining the
-- set (its id: the name up to its last '|'; ids may hold a '|', no suffix
-- does).
-- KEYS: the queue's 21 keys. ARGV: the scan's cursor ('0' to begin)
-- Returns the next cursor; '0' once the scan is over and state's xt is set.
-- Guarantees: a scan from '0' to '0' sets xt with every task that had an
-- extra field throughout it in the set: a field written meanwhile was
-- added by its writer (extra), and one deleted meanwhile needs nothing.
-- Idempotent; a tracked queue returns '0' at once. (A task of the release
-- before the heads, its value the bare message and its id holding a '|',
-- adds a name that is no task: never read, never removed.)
if extras_tracked(0) then return '0' end
local r = redis.call('HSCAN', KEYS[4], ARGV[1], 'MATCH', '*|*', 'COUNT', 1000)
local fs = r[2]
for i = 1, #fs, 2 do
  -- (a value with a head is a task's own, its id holding a '|')
  local id = string.byte(fs[i + 1], 1) ~= 1 and string.match(fs[i], '^(.*)|[^|]*$')
  if id then redis.call('SADD', KEYS[21], id) end
end
if r[1] == '0' then redis.call('HSET', KEYS[3], 'xt', 1) end
return r[1]
