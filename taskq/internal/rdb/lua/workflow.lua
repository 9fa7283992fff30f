-- workflow: add a workflow's nodes (a DAG) to one queue, in one call.
-- KEYS: the queue's 18 keys.
-- ARGV: now_ms, then per node 7 values: id, msg, tenant, weight,
--       prio(2 hex), parents (how many), children (space-separated ids)
-- Returns the number of nodes added: all, or 0 if any id exists (nothing
-- is added then).
-- Guarantees: atomic; a node without parents is pending (one wake-up token
-- for the call), every other waits in scheduled at WAITING with id|wp its
-- parent count and id|wc its children, until its last parent's ack makes
-- it pending (ack.lua), or a parent's death or cancel cancels it (fail.lua,
-- cancel.lua). A waiting node's id|m is its member, as any task's.
local now = tonumber(ARGV[1])
for i = 2, #ARGV, 7 do
  if redis.call('HEXISTS', KEYS[4], ARGV[i]) == 1 then return 0 end
end
local woke = false
for i = 2, #ARGV, 7 do
  local id, parents, kids = ARGV[i], tonumber(ARGV[i + 5]), ARGV[i + 6]
  local due = 0
  if parents > 0 then due = WAITING end
  add_task(0, now, id, ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4], due)
  if parents > 0 then
    redis.call('HSET', KEYS[4], id .. '|wp', parents)
  else
    woke = true
  end
  if kids ~= '' then redis.call('HSET', KEYS[4], id .. '|wc', kids) end
end
if woke then wake(0) end
return (#ARGV - 1) / 7
