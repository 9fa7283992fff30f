-- requeue: give tasks back to their queue without counting a failure
-- (graceful shutdown). KEYS: the queue's 21 keys. ARGV: ids...
-- Returns the number requeued. Guarantees: atomic; the task keeps its place
-- in its tenant's order (its member is unchanged) and its start is uncounted
-- (starts count attempts and lost leases), so the next run is not reported
-- as a duplicate; its progress is dropped.
local n = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  local m = release(0, id)
  if m then
    redis.call('HDEL', KEYS[4], id .. '|p') -- the next start reports its own
    activate(0, m)
    n = n + 1
  end
end
if n > 0 then wake(0) end
return n
