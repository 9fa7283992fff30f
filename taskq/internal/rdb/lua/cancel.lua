-- cancel: cancel one task of a queue, whatever it is doing.
-- KEYS: the queue's 21 keys.
-- ARGV: now_ms, who, id, member ('' = the one enqueue recorded), channel, queue
-- Returns the task's state before: 'pending' | 'scheduled' | 'retry' |
-- 'active' (then cancelled here) or 'dead' | 'completed' | 'cancelled' |
-- 'unknown' (then unchanged).
-- Guarantees: atomic; a cancelled task leaves every place a worker takes
-- work from, so it never runs (again) and is never retried: an active one
-- loses its lease at once (the holder's ack or failure finds nothing), and
-- its id is published on channel (queue \0 id) so the worker running it
-- cancels its handler now; a worker that misses the message finds the lease
-- gone at its next heartbeat. The task waits in cancelled, with who and when,
-- until the dead retention trims it. A workflow node's waiting descendants
-- are cancelled with it.
local now, who, id, hint, channel, queue = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if redis.call('ZSCORE', KEYS[13], id) then return 'cancelled' end
if redis.call('ZSCORE', KEYS[9], id) then return 'dead' end
if redis.call('ZSCORE', KEYS[10], id) then return 'completed' end
local state = 'active'
local m = release(0, id)
if not m then
  m = member_of(0, id)
  if not m and hint ~= '' then m = hint end
  if not m then return 'unknown' end
  if redis.call('ZREM', KEYS[1], m) == 1 then
    state = 'pending'
  elseif redis.call('ZREM', KEYS[7], m) == 1 then
    state = 'scheduled'
  elseif redis.call('ZREM', KEYS[8], m) == 1 then
    state = 'retry'
  else
    return 'unknown'
  end
end
redis.call('HSET', KEYS[4], id .. '|c', who .. '\0' .. now)
extra(0, id)
if member_of(0, id) ~= m then redis.call('HSET', KEYS[4], id .. '|m', m) end
redis.call('ZADD', KEYS[13], now, id)
redis.call('HINCRBY', KEYS[3], 'cancelled', 1)
redis.call('HDEL', KEYS[4], id .. '|wp')
cancel_descendants(0, id, now, 'parent ' .. id .. ' cancelled')
if state == 'active' then
  -- Its run, cut short, is a start without an outcome: counted with the
  -- lost ones (id|n; lib.lua lost_start), but no re-delivery is due.
  local n = tonumber(redis.call('HGET', KEYS[4], id .. '|n') or '0')
  redis.call('HSET', KEYS[4], id .. '|n', math.abs(n) + 1)
  redis.call('PUBLISH', channel, queue .. '\0' .. id)
end
return state
