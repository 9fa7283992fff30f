-- pause: pause or resume a queue, or one tenant of it.
-- KEYS: the queue's 21 keys.
-- ARGV: op ('pause' | 'resume'), tenant ('' = the whole queue), until_ms (pause only)
-- Returns 1; an unknown op is an error (nothing changed).
-- Guarantees: atomic; from the reply on, no dequeue takes a task of a paused
-- queue or tenant (enqueue still succeeds: the tasks wait); a pause ends at
-- until_ms (in the next dequeue or maintain) or on resume, which wakes idle
-- workers. A resumed tenant re-enters fairness as a newly active tenant.
local op, t, untl = ARGV[1], ARGV[2], ARGV[3]
if op ~= 'pause' and op ~= 'resume' then
  return redis.error_reply('ERR pause: op "' .. op .. '": want pause or resume')
end
if t == '' then
  if op == 'pause' then
    redis.call('HSET', KEYS[3], 'pause', untl)
  else
    redis.call('HDEL', KEYS[3], 'pause')
    wake(0)
  end
  return 1
end
if string.sub(t, -1) == '/' then
  return redis.error_reply('ERR pause: "' .. t .. '" is an inner node of the tenant tree: pause the tenants below it')
end
if op == 'pause' then
  redis.call('HSET', KEYS[3], 'p:' .. t, untl)
  local s = redis.call('ZSCORE', KEYS[2], t)
  if s and tonumber(s) < PAUSED then
    redis.call('ZADD', KEYS[2], tonumber(s) + PAUSED, t)
  elseif is_path(t) and redis.call('HEXISTS', KEYS[3], 'n:' .. t) == 1 then
    -- A path tenant leaves the tree and waits in tenants, as a flat one.
    tree_remove(0, t)
    redis.call('ZADD', KEYS[2], start_tag(0, t) + PAUSED, t)
  end
else
  redis.call('HDEL', KEYS[3], 'p:' .. t)
  local s = redis.call('ZSCORE', KEYS[2], t)
  if s and tonumber(s) >= PAUSED and is_path(t) then
    redis.call('ZREM', KEYS[2], t)
    tree_activate(0, t)
  elseif s and tonumber(s) >= PAUSED then
    redis.call('ZADD', KEYS[2], start_tag(0, t), t)
  end
  wake(0)
end
return 1
