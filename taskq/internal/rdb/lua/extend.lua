-- extend: heartbeat, push the lease of tasks still held out to lease_until.
-- KEYS: the queue's 21 keys. ARGV: lease_until_ms, then id, ends pairs:
-- ends is the lease ends the caller may have set for id, comma-separated:
-- the one its dequeue or last answered extend set, then those of extends
-- whose answer it did not get (each may or may not have applied).
-- Returns the ids whose lease was lost (the worker should stop them).
-- Guarantees: only leases that still exist are set (ZADD XX: a lost lease
-- is never recreated); a lease whose end is none of the caller's ends is
-- lost, not set: the reaper gave the task back and a dequeue leased it
-- again, to another worker or to a second copy in this one's buffer
-- (fencing: the lease end is the holder's token, free since every lease
-- has one; two holders' ends meet only if their clocks and lease lengths
-- line up to the millisecond); each kept lease is set to lease_until_ms as
-- given, even if that is earlier (callers pass now + the lease duration).
local until_ms = tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local cur = redis.call('ZSCORE', KEYS[6], id)
  local held = false
  if cur then
    cur = tonumber(cur)
    for e in string.gmatch(ARGV[i + 1], '[^,]+') do
      if tonumber(e) == cur then held = true break end
    end
  end
  if held then
    redis.call('ZADD', KEYS[6], 'XX', until_ms, id)
  else
    lost[#lost + 1] = id
  end
end
return lost
