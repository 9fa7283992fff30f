-- dequeue: take up to n tasks from several queues in ONE call.
-- KEYS: 17 keys per queue, queues in the order to serve them (the caller
--       orders them: strict priority, or a weighted shuffle, then steal targets).
-- ARGV: n, now_ms, lease_until_ms, promote_limit
-- Returns a flat array, 6 values per task: queue index (1-based), id, msg
-- ('' if the message is missing), retried, starts, tenant (from the member:
-- the message does not carry it); then one last value: the earliest time
-- (ms) a throttled tenant or queue may run again, 0 if none waits on a rate.
-- Guarantees: inside a queue, tenants are served in weighted start-time fair
-- order (virtual time advances to the start tag of each served task; a tenant
-- of weight w advances by 1/w per task) and each tenant's tasks in priority,
-- then FIFO order; each O(log n). Every returned task is in active with a
-- lease; a paused queue is skipped and a paused tenant's tasks stay (a
-- pause that is over ends here or in maintain); when work is left in a queue it served and no wake-up token is
-- queued, one token is pushed so another idle worker joins. A task whose starts exceed retried+1 was re-delivered after a lost
-- lease and is counted in state.dup.
-- Limits (lib.lua, +16/+17): a tenant at its in-flight cap or out of rate
-- tokens is parked in throttled and the next tenant is served; a queue at
-- its own cap or rate is left for the next queue. An admin weight in the
-- limits overrides the weight the enqueues carry.
local n = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local until_ms = tonumber(ARGV[3])
local plimit = tonumber(ARGV[4])
local out = {}
local got = 0
local hint = 0
local function note(t)
  if t > 0 and t < HELD and (hint == 0 or t < hint) then hint = t end
end
for q = 0, #KEYS / NKEYS - 1 do
  if got >= n then break end
  local k = q * NKEYS
  local before = got
  local paused = queue_paused(k, now)
  if not paused then promote(k, now, plimit) end
  local qlim = redis.call('HGET', KEYS[k + 16], 'q')
  local lims = {}
  if redis.call('ZCARD', KEYS[k + 17]) > 0 then unpark_due(k, now) end
  while got < n and not paused do
    if qlim then
      local wait = limited(k, 'tok:q', qlim, redis.call('HLEN', KEYS[k + 5]), now, true)
      if wait > 0 then
        if redis.call('ZCARD', KEYS[k + 2]) > 0 then
          redis.call('ZADD', KEYS[k + 17], 'GT', wait, QUEUE)
          note(wait)
        end
        break
      end
    end
    local top = redis.call('ZRANGE', KEYS[k + 2], 0, 0, 'WITHSCORES')
    if #top == 0 then break end
    local t, s = top[1], tonumber(top[2])
    if s >= PAUSED then
      -- Every tenant left is paused: resume those whose pause is over.
      if resume_tenants(k, now) == 0 then break end
      top = redis.call('ZRANGE', KEYS[k + 2], 0, 0, 'WITHSCORES')
      t, s = top[1], tonumber(top[2])
      if s >= PAUSED then break end
    end
    local head = redis.call('ZRANGEBYLEX', KEYS[k + 1], '[' .. t .. '\0', '(' .. t .. '\1', 'LIMIT', 0, 1)
    if #head == 0 then
      redis.call('ZREM', KEYS[k + 2], t)
    else
      if lims[t] == nil then lims[t] = redis.call('HGET', KEYS[k + 16], 't:' .. t) end
      local lim = lims[t]
      local wait = 0
      if lim then
        wait = limited(k, 'tok:t:' .. t, lim, tonumber(redis.call('HGET', KEYS[k + 3], 'a:' .. t) or '0'), now, false)
      end
      if wait > 0 then
        park(k, t, s, wait)
        note(wait)
      else
      if qlim then limited(k, 'tok:q', qlim, 0, now, false) end
      local m = head[1]
      redis.call('ZREM', KEYS[k + 1], m)
      local w = 0
      if lim then w = select(4, parse_limit(lim)) end
      if w <= 0 then w = tonumber(redis.call('HGET', KEYS[k + 3], 'w:' .. t) or '1') end
      if w <= 0 then w = 1 end
      local f = s + 1 / w
      redis.call('HSET', KEYS[k + 3], 'vt', s)
      local more = redis.call('ZRANGEBYLEX', KEYS[k + 1], '[' .. t .. '\0', '(' .. t .. '\1', 'LIMIT', 0, 1)
      if #more == 0 then
        redis.call('ZREM', KEYS[k + 2], t)
        redis.call('HSET', KEYS[k + 3], 'f:' .. t, f)
      else
        redis.call('ZADD', KEYS[k + 2], f, t)
      end
      local id = id_of(m)
      redis.call('HSET', KEYS[k + 5], id, m)
      redis.call('ZADD', KEYS[k + 6], until_ms, id)
      redis.call('HINCRBY', KEYS[k + 3], 'a:' .. t, 1)
      local starts = redis.call('HINCRBY', KEYS[k + 4], id .. '|n', 1)
      local retried = tonumber(redis.call('HGET', KEYS[k + 4], id .. '|r') or '0')
      if starts > retried + 1 then
        redis.call('HINCRBY', KEYS[k + 3], 'dup', 1)
      end
      local msg = redis.call('HGET', KEYS[k + 4], id) or ''
      out[#out + 1] = q + 1
      out[#out + 1] = id
      out[#out + 1] = msg
      out[#out + 1] = retried
      out[#out + 1] = starts
      out[#out + 1] = t
      got = got + 1
      end
    end
  end
  -- Tell the caller when the first tenant throttled by a rate may run
  -- again: nothing else wakes an idle worker for it.
  if redis.call('ZCARD', KEYS[k + 17]) > 0 then
    local first = redis.call('ZRANGE', KEYS[k + 17], 0, 0, 'WITHSCORES')
    note(tonumber(first[2]))
  end
  -- Chain wake-up: work is left and no token waits, so wake one more idle
  -- worker (one enqueue call may have added many tasks but one token).
  if got > before and redis.call('ZCARD', KEYS[k + 2]) > 0 and redis.call('LLEN', KEYS[k + 12]) == 0 then
    redis.call('LPUSH', KEYS[k + 12], '1')
  end
end
out[#out + 1] = hint
return out
