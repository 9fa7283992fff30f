-- enqueue: add one task (or a batch) to one queue.
-- KEYS: the queue's 13 keys (see lib.lua).
-- ARGV: now_ms, then per task 6 values: id, msg, tenant, weight, prio(2 hex), due_ms
-- Returns the number of tasks added; an id that already exists is skipped.
-- Guarantees: atomic per call; the task is pending (or scheduled if due_ms >
-- now_ms) when the reply arrives; one wake-up token per call for idle workers.
local now = tonumber(ARGV[1])
local added = 0
local woke = false
for i = 2, #ARGV, 6 do
  local id, msg, t, w, prio, due = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4], tonumber(ARGV[i + 5])
  if redis.call('HSETNX', KEYS[4], id, msg) == 1 then
    local seq = redis.call('HINCRBY', KEYS[3], 'seq', 1)
    local member = t .. '\0' .. prio .. string.format('%016x', seq) .. '\0' .. id
    redis.call('HSET', KEYS[4], id .. '|m', member)
    if w > 0 then
      redis.call('HSET', KEYS[3], 'w:' .. t, w)
    elseif not redis.call('HGET', KEYS[3], 'w:' .. t) then
      redis.call('HSET', KEYS[3], 'w:' .. t, 1)
    end
    redis.call('HINCRBY', KEYS[3], 'enqueued', 1)
    if due > now then
      redis.call('ZADD', KEYS[7], due, member)
    else
      activate(0, member)
      woke = true
    end
    added = added + 1
  end
end
if woke then wake(0) end
return added
