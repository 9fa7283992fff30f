-- fail: record one failed attempt of a task of one queue.
-- KEYS: the queue's 21 keys.
-- ARGV: now_ms, id, error, retry_at_ms (0 = no retry: dead), reason (for dead),
--       snooze ('1': the handler snoozed it until retry_at_ms: no failure, no
--       attempt counted, error ignored)
-- Returns 1 if retried, 2 if dead, 3 if snoozed, 0 if the worker no longer
-- held the task.
-- Guarantees: atomic; a retried task waits in retry until retry_at_ms and its
-- retried count grows; a dead task keeps its message, last error, reason and
-- member (for dlq requeue) until dlq delete or retention trims it; a
-- snoozed task waits in scheduled, its retried count unchanged, its snoozes
-- (id|s) counted. A dead workflow node cancels the nodes waiting below it.
local now = tonumber(ARGV[1])
local id, err, at, reason = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local m = release(0, id)
if not m then
  redis.call('HINCRBY', KEYS[3], 'late', 1)
  return 0
end
extra(0, id) -- every outcome below writes a field of it
if ARGV[6] == '1' then
  redis.call('HINCRBY', KEYS[3], 'snoozed', 1)
  redis.call('HDEL', KEYS[4], id .. '|p')
  redis.call('HINCRBY', KEYS[4], id .. '|s', 1)
  redis.call('ZADD', KEYS[7], at, m)
  return 3
end
redis.call('HINCRBY', KEYS[3], 'processed', 1)
redis.call('HINCRBY', KEYS[3], 'failed', 1)
redis.call('HSET', KEYS[4], id .. '|e', err)
if at > 0 then
  redis.call('HDEL', KEYS[4], id .. '|p') -- the next attempt reports its own
  redis.call('HINCRBY', KEYS[4], id .. '|r', 1)
  redis.call('ZADD', KEYS[8], at, m)
  return 1
end
redis.call('HSET', KEYS[4], id .. '|d', reason)
if member_of(0, id) ~= m then redis.call('HSET', KEYS[4], id .. '|m', m) end
redis.call('ZADD', KEYS[9], now, id)
cancel_descendants(0, id, now, 'parent ' .. id .. ' failed', true)
redis.call('HINCRBY', KEYS[3], 'deadtotal', 1)
return 2
