-- extend: heartbeat, push the lease of tasks still held out to lease_until.
-- KEYS: the queue's 20 keys. ARGV: lease_until_ms, then id, held_ms pairs:
-- held_ms is the lease end the caller last set for id (by the dequeue or
-- an extend whose answer it saw), 0 when it does not know it.
-- Returns the ids whose lease was lost (the worker should stop them).
-- Guarantees: only leases that still exist are set (ZADD XX: a lost lease
-- is never recreated); a lease whose end is not held_ms is lost, not set:
-- the reaper gave the task back and a dequeue leased it again, to another
-- worker or to a second copy in this one's buffer (fencing: the lease end
-- is the holder's token, free since every lease already has one); each
-- kept lease is set to lease_until_ms as given, even if that is earlier
-- (callers pass now + the lease duration).
local until_ms = tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV, 2 do
  local id, held = ARGV[i], tonumber(ARGV[i + 1])
  local cur = redis.call('ZSCORE', KEYS[6], id)
  if not cur or (held ~= 0 and tonumber(cur) ~= held) then
    lost[#lost + 1] = id
  else
    redis.call('ZADD', KEYS[6], 'XX', until_ms, id)
  end
end
return lost
