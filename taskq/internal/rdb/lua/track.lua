-- track: one step of the scan that makes a queue written by an earlier
-- release trust its extras set (lib.lua extras): the tasks hash is read
-- 1,000 fields at a time (its values stay in Redis) and every task with a
-- field beside its value joins the set.
-- KEYS: the queue's 21 keys. ARGV: the scan's cursor ('0' to begin)
-- Returns the next cursor; '0' once the scan is over and state's xt is set.
-- Guarantees: a scan from '0' to '0' sets xt with every task that had an
-- extra field throughout it in the set: a field written meanwhile was
-- added by its writer (extra), and one deleted meanwhile needs nothing.
-- Idempotent; a tracked queue returns '0' at once.
if extras_tracked(0) then return '0' end
local r = redis.call('HSCAN', KEYS[4], ARGV[1], 'COUNT', 1000)
local fs = r[2]
for i = 1, #fs, 2 do
  local bar = string.find(fs[i], '|', 1, true)
  if bar then redis.call('SADD', KEYS[21], string.sub(fs[i], 1, bar - 1)) end
end
if r[1] == '0' then redis.call('HSET', KEYS[3], 'xt', 1) end
return r[1]
