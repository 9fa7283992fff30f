-- taskop: delete one task, or run one waiting task now.
-- KEYS: the queue's 21 keys.
-- ARGV: op ('delete' | 'run'), id, member ('' = the one enqueue recorded), now_ms
-- Returns the task's state before ('pending', 'scheduled', 'retry', 'active',
-- 'dead', 'completed', 'cancelled', 'unknown') and whether it acted (1/0);
-- an unknown op is an error (nothing changed).
-- Guarantees: atomic. delete removes a task that is not active from wherever
-- it waits and leaves no field behind (an active task: cancel it first).
-- run makes a scheduled, retry, dead or cancelled task pending at once, in
-- its tenant's order (dead and cancelled ones start over: retried and starts
-- reset); a pending, active or completed task is left as it is, and so is
-- a workflow node waiting for its parents ('waiting'). Deleting a workflow
-- node cancels the nodes waiting below it (as its cancel would).
local op, id, hint, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if op ~= 'delete' and op ~= 'run' then
  return redis.error_reply('ERR taskop: op "' .. op .. '": want delete or run')
end
local function where()
  if redis.call('HEXISTS', KEYS[5], id) == 1 then return 'active', nil end
  for _, z in ipairs({{'dead', 9}, {'completed', 10}, {'cancelled', 13}}) do
    if redis.call('ZSCORE', KEYS[z[2]], id) then return z[1], z[2] end
  end
  local m = member_of(0, id)
  if not m and hint ~= '' then m = hint end
  if not m then return 'unknown', nil end
  for _, z in ipairs({{'pending', 1}, {'scheduled', 7}, {'retry', 8}}) do
    if redis.call('ZSCORE', KEYS[z[2]], m) then return z[1], z[2], m end
  end
  return 'unknown', nil
end
local state, key, m = where()
if state == 'unknown' or state == 'active' then return {state, 0} end
if op == 'run' and state == 'scheduled' and tonumber(redis.call('ZSCORE', KEYS[7], m)) >= WAITING then
  return {'waiting', 0}
end
if op == 'delete' then
  cancel_descendants(0, id, now, 'parent ' .. id .. ' deleted')
  redis.call('HDEL', KEYS[4], id .. '|wp')
  if m then redis.call('ZREM', KEYS[key], m) else redis.call('ZREM', KEYS[key], id) end
  if state == 'completed' then redis.call('HDEL', KEYS[11], id) end
  forget(0, id)
  return {state, 1}
end
if state == 'pending' or state == 'completed' then return {state, 0} end
if not m then
  m = member_of(0, id)
  if not m then return {state, 0} end
  redis.call('ZREM', KEYS[key], id)
  redis.call('HDEL', KEYS[4], id .. '|r', id .. '|n', id .. '|e', id .. '|d', id .. '|c', id .. '|p', id .. '|s', id .. '|wc', id .. '|wp', id .. '|wk')
else
  redis.call('ZREM', KEYS[key], m)
end
activate(0, m)
wake(0)
return {state, 1}
