-- ack: record successful tasks of one queue (a batch).
-- KEYS: the queue's 17 keys.
-- ARGV: now_ms, then per task 3 values: id, keep_until_ms (0 = delete at once), result ('' = none)
-- Returns the number of tasks this worker still held. A task whose lease was
-- lost (reaped and possibly re-run elsewhere) is counted in state.late and
-- left alone: the holder of the new lease completes it.
-- Guarantees: atomic; completed tasks leave active/lease; counters processed,
-- completed and c:<tenant> grow; retained records expire via maintain.
local now = tonumber(ARGV[1])
local held = 0
for i = 2, #ARGV, 3 do
  local id, keep, res = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local m = release(0, id)
  if m then
    held = held + 1
    local t = tenant_of(m)
    redis.call('HINCRBY', KEYS[3], 'c:' .. t, 1)
    redis.call('HINCRBY', KEYS[3], 'completed', 1)
    redis.call('HINCRBY', KEYS[3], 'processed', 1)
    if keep > now then
      redis.call('HDEL', KEYS[4], id .. '|r', id .. '|n', id .. '|e', id .. '|m')
      redis.call('ZADD', KEYS[10], keep, id)
      if res ~= '' then redis.call('HSET', KEYS[11], id, res) end
    else
      forget(0, id)
    end
  else
    redis.call('HINCRBY', KEYS[3], 'late', 1)
  end
end
return held
