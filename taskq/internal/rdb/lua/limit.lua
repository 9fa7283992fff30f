-- limit: set or clear the limit of a queue, or of one tenant of it.
-- KEYS: the queue's 21 keys.
-- ARGV: op ('set' | 'clear' | 'clearall'), tenant ('' = the whole queue),
--       value (set: "rate burst max weight", see lib.lua)
-- Returns 1 if it set a limit (even to the value it had) or removed one, 0
-- if there was nothing to clear; an unknown op is an error (nothing changed).
-- Guarantees: atomic; from the reply on, every dequeue applies the new
-- limits: the throttled tenants are given their place back (and parked
-- again if still limited) and idle workers are woken.
local op, t, v = ARGV[1], ARGV[2], ARGV[3]
if op ~= 'set' and op ~= 'clear' and op ~= 'clearall' then
  return redis.error_reply('ERR limit: op "' .. op .. '": want set, clear or clearall')
end
local field, tok = 'q', 'tok:q'
if t ~= '' then field, tok = 't:' .. t, 'tok:t:' .. t end
local changed
if op == 'set' then
  changed = redis.call('HSET', KEYS[16], field, v) >= 0
elseif op == 'clear' then
  changed = redis.call('HDEL', KEYS[16], field, tok) > 0
else
  changed = redis.call('DEL', KEYS[16]) > 0
end
unpark_due(0, false)
wake(0)
if changed then return 1 end
return 0
