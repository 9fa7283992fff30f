-- maintain: periodic housekeeping of one queue, run by every worker.
-- KEYS: the queue's 21 keys.
-- ARGV: now_ms, limit, dead_before_ms (dead tasks older are deleted), dead_max
-- Returns {reaped, promoted, trimmed}.
-- Guarantees: tasks whose lease expired at or before now (their worker died or
-- lost Redis) go back to pending in their old place (at-least-once; the next
-- start is counted as a duplicate); due scheduled/retry tasks become pending,
-- and due groups batch tasks (counted as promoted); workflow records older
-- than the dead retention go;
-- expired completed records and results, unique keys whose hold ended,
-- dead tasks past retention or beyond
-- dead_max, and cancelled tasks past the dead retention are deleted; queue
-- and tenant pauses that are over end. At most limit of each per call.
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local dead_before, dead_max = tonumber(ARGV[3]), tonumber(ARGV[4])
local reaped = 0
local expired = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  local m = release(0, id)
  if m then
    lost_start(0, id)
    activate(0, m)
    reaped = reaped + 1
  else
    redis.call('ZREM', KEYS[6], id)
  end
end
if reaped > 0 then
  redis.call('HINCRBY', KEYS[3], 'reaped', reaped)
  wake(0)
end
local resumed = resume_tenants(0, now)
if redis.call('HEXISTS', KEYS[3], 'pause') == 1 and not queue_paused(0, now) then resumed = resumed + 1 end
if resumed > 0 then wake(0) end
local promoted = 0
if not queue_paused(0, now) then promoted = promote(0, now, limit) end
for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[18], '-inf', now, 'LIMIT', 0, limit)) do
  if flush_group(0, key, now) then promoted = promoted + 1 end
end
for _, wf in ipairs(redis.call('ZRANGEBYSCORE', KEYS[19], '-inf', dead_before, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[19], wf)
  redis.call('HDEL', KEYS[4], 'wf:' .. wf)
end
if promoted > 0 then wake(0) end
local trimmed = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[10], '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[10], id)
  forget(0, id)
  trimmed = trimmed + 1
end
local old = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', dead_before, 'LIMIT', 0, limit)
local over = redis.call('ZCARD', KEYS[9]) - dead_max
if over > 0 then
  local extra = redis.call('ZRANGE', KEYS[9], 0, math.min(over, limit) - 1)
  for _, id in ipairs(extra) do old[#old + 1] = id end
end
for _, id in ipairs(old) do
  if redis.call('ZREM', KEYS[9], id) == 1 then
    forget(0, id)
    trimmed = trimmed + 1
  end
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[13], '-inf', dead_before, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[13], id)
  forget(0, id)
  trimmed = trimmed + 1
end
expire_unique(0, now, limit)
return {reaped, promoted, trimmed}
