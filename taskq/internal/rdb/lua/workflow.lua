-- workflow: add a workflow's nodes (a DAG) to one queue, in one call.
-- KEYS: the queue's 21 keys.
-- ARGV: now_ms, workflow id, its record (JSON), then per node 9 values:
--       id, msg, tenant, weight, prio(2 hex), parents (how many), children
--       (space-separated ids), due_ms (a root's: 0 = now), keep_going ('1':
--       a parent that dies counts as done for it, id|wk)
-- Returns the number of nodes added: all, or 0 if the workflow or any id
-- exists (nothing is added then).
-- Guarantees: atomic; a node without parents is pending (one wake-up token
-- for the call) or scheduled if due later, every other waits in scheduled at WAITING with id|wp its
-- parent count and id|wc its children, until its last parent's ack makes
-- it pending (ack.lua), or a parent's death or cancel cancels it (fail.lua,
-- cancel.lua). A waiting node's member is in its stored value, as any task's. The
-- record is tasks' wf:<id>, listed in workflows by enqueue time until
-- maintain.lua trims it with the dead tasks.
local now, wf = tonumber(ARGV[1]), ARGV[2]
if redis.call('HEXISTS', KEYS[4], 'wf:' .. wf) == 1 then return 0 end
for i = 4, #ARGV, 9 do
  if redis.call('HEXISTS', KEYS[4], ARGV[i]) == 1 then return 0 end
end
track_new(0)
redis.call('HSET', KEYS[4], 'wf:' .. wf, ARGV[3])
redis.call('HSET', KEYS[3], 'links', 1) -- acks look for children from now on
redis.call('ZADD', KEYS[19], now, wf)
local woke = false
for i = 4, #ARGV, 9 do
  local id, parents, kids = ARGV[i], tonumber(ARGV[i + 5]), ARGV[i + 6]
  local due = tonumber(ARGV[i + 7])
  if parents > 0 then due = WAITING end
  add_task(0, now, id, ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4], due)
  if parents > 0 or kids ~= '' then extra(0, id) end
  if parents > 0 then
    redis.call('HSET', KEYS[4], id .. '|wp', parents)
  elseif due <= now then
    woke = true
  end
  if kids ~= '' then redis.call('HSET', KEYS[4], id .. '|wc', kids) end
  if ARGV[i + 8] == '1' and parents > 0 then redis.call('HSET', KEYS[4], id .. '|wk', 1) end
end
if woke then wake(0) end
return (#ARGV - 3) / 9
