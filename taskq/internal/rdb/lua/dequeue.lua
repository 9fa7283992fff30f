-- dequeue: take up to n tasks from several queues in ONE call.
-- KEYS: 15 keys per queue, queues in the order to serve them (the caller
--       orders them: strict priority, or a weighted shuffle, then steal targets).
-- ARGV: n, now_ms, lease_until_ms, promote_limit
-- Returns a flat array, 6 values per task: queue index (1-based), id, msg
-- ('' if the message is missing), retried, starts, tenant (from the member:
-- the message does not carry it).
-- Guarantees: inside a queue, tenants are served in weighted start-time fair
-- order (virtual time advances to the start tag of each served task; a tenant
-- of weight w advances by 1/w per task) and each tenant's tasks in priority,
-- then FIFO order; each O(log n). Every returned task is in active with a
-- lease; a paused queue is skipped and a paused tenant's tasks stay (a
-- pause that is over ends here or in maintain); when work is left in a queue it served and no wake-up token is
-- queued, one token is pushed so another idle worker joins. A task whose starts exceed retried+1 was re-delivered after a lost
-- lease and is counted in state.dup.
local n = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local until_ms = tonumber(ARGV[3])
local plimit = tonumber(ARGV[4])
local out = {}
local got = 0
for q = 0, #KEYS / NKEYS - 1 do
  if got >= n then break end
  local k = q * NKEYS
  local before = got
  local paused = queue_paused(k, now)
  if not paused then promote(k, now, plimit) end
  while got < n and not paused do
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
      local m = head[1]
      redis.call('ZREM', KEYS[k + 1], m)
      local w = tonumber(redis.call('HGET', KEYS[k + 3], 'w:' .. t) or '1')
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
  -- Chain wake-up: work is left and no token waits, so wake one more idle
  -- worker (one enqueue call may have added many tasks but one token).
  if got > before and redis.call('ZCARD', KEYS[k + 2]) > 0 and redis.call('LLEN', KEYS[k + 12]) == 0 then
    redis.call('LPUSH', KEYS[k + 12], '1')
  end
end
return out
