-- dlq: requeue or delete dead tasks of one queue.
-- KEYS: the queue's 21 keys. ARGV: op ('requeue' | 'delete'), ids... (none = all)
-- Returns the number of tasks affected; an unknown op is an error (nothing
-- changed).
-- Guarantees: atomic; a requeued task starts over (retried, starts, last
-- error, reason and progress reset) in its tenant's order; a deleted task
-- leaves no field behind. A dead task without a recorded member (from a
-- release before members were recorded) cannot be put back in order:
-- requeue leaves it dead and does not count it (delete removes it).
local op = ARGV[1]
if op ~= 'requeue' and op ~= 'delete' then
  return redis.error_reply('ERR dlq: op "' .. op .. '": want requeue or delete')
end
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then ids = redis.call('ZRANGE', KEYS[9], 0, -1) end
local n = 0
for _, id in ipairs(ids) do
  local m = member_of(0, id)
  if (op == 'delete' or m) and redis.call('ZREM', KEYS[9], id) == 1 then
    n = n + 1
    if op == 'requeue' then
      redis.call('HDEL', KEYS[4], id .. '|r', id .. '|n', id .. '|e', id .. '|d', id .. '|p', id .. '|s', id .. '|wc', id .. '|wp', id .. '|wk')
      activate(0, m)
    else
      forget(0, id)
    end
  end
end
if op == 'requeue' and n > 0 then wake(0) end
return n
