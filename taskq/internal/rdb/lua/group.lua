-- group: add one task to an aggregation group of one queue.
-- KEYS: the queue's 21 keys.
-- ARGV: now_ms, id, msg, tenant, weight, prio(2 hex), group key, max_size,
--       grace_ms, max_delay_ms (the group's policy: the first member's)
-- Returns 0 if the id exists (nothing added), 1 if the task joined its
-- group, 2 if it filled it (the group became a batch task, pending).
-- Guarantees: atomic; the task waits in scheduled at WAITING, listed in
-- g:<key>, until its group is handed over as one batch (lib.lua
-- flush_group): at max_size members here, else when groups says it is due
-- (maintain.lua) — max_delay after its first member or grace after its
-- last, whichever is sooner. A task is in one batch only.
local now, id, key = tonumber(ARGV[1]), ARGV[2], ARGV[7]
track_new(0)
if add_task(0, now, id, ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6], WAITING) == 0 then return 0 end
local gk = 'g:' .. key
local ids = redis.call('HGET', KEYS[4], gk)
local first, count, size, grace, delay = now, 1, tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
if ids then
  local t = redis.call('HGET', KEYS[4], gk .. '|t')
  local f, c, s, g, d = string.match(t, '^(%S+) (%S+) (%S+) (%S+) (%S+)$')
  first, count, size, grace, delay = tonumber(f), tonumber(c) + 1, tonumber(s), tonumber(g), tonumber(d)
  ids = ids .. ' ' .. id
else
  ids = id
end
redis.call('HSET', KEYS[4], gk, ids, gk .. '|t', first .. ' ' .. count .. ' ' .. size .. ' ' .. grace .. ' ' .. delay)
if count >= size then
  flush_group(0, key, now)
  wake(0)
  return 2
end
redis.call('ZADD', KEYS[18], math.min(first + delay, now + grace), key)
return 1
