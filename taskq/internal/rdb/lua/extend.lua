-- extend: heartbeat, push the lease of tasks still held out to lease_until.
-- KEYS: the queue's 20 keys. ARGV: lease_until_ms, ids...
-- Returns the ids whose lease was already lost (the worker should stop them).
-- Guarantees: only leases that still exist are set (ZADD XX: a lost lease
-- is never recreated); each is set to lease_until_ms as given, even if
-- that is earlier (callers pass now + the lease duration).
local until_ms = tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV do
  if redis.call('ZADD', KEYS[6], 'XX', 'CH', until_ms, ARGV[i]) == 0 and not redis.call('ZSCORE', KEYS[6], ARGV[i]) then
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
