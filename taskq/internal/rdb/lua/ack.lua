-- ack: record successful tasks of one queue (a batch).
-- KEYS: the queue's 21 keys.
-- ARGV: now_ms, then per task 3 values: id, keep_until_ms (0 = delete at once), result ('' = none)
-- Returns the number of tasks this worker still held. A task whose lease was
-- lost (reaped and possibly re-run elsewhere) is counted in state.late and
-- left alone: the holder of the new lease completes it. An id given twice
-- counts as two acks in a row: one completion, then one late.
-- Guarantees: atomic; completed tasks leave active/lease; counters processed,
-- completed and c:<tenant> grow (a:<tenant> shrinks); a task kept
-- (keep_until_ms > now_ms) waits in completed with its message, progress,
-- result (unless '') and run history (retries id|r, lost starts id|n)
-- until maintain trims it, its other fields gone;
-- any other leaves nothing behind (message, fields, result). A tenant (or
-- the queue) throttled at its in-flight cap may run again. A workflow
-- node's children whose last parent it was become pending (one wake-up
-- token), in this same call.
-- Cost: a few calls for the whole batch, plus one per retained task. A
-- task not in extras (lib.lua extras; the queue tracked) has only its
-- value, the one field deleted; of any other task every field it may have
-- is deleted, there or not (a progress report or a cancel written since
-- its dequeue is among them), and it leaves extras.
local now = tonumber(ARGV[1])
local ids = {}
for i = 2, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return 0 end
local links = redis.call('HEXISTS', KEYS[3], 'links') == 1
local members = chunked('HMGET', KEYS[5], ids)
-- dirty[i]: ids[i] may have fields beside its value (lib.lua extras).
local dirty = {}
if extras_tracked(0) then dirty = chunked('SMISMEMBER', KEYS[21], ids) end
local held, gone, fields, per, seen, wcs, cleaned = {}, {}, {}, {}, {}, {}, {}
for i, id in ipairs(ids) do
  local m = members[i]
  if m and not seen[id] then
    seen[id] = true
    held[#held + 1] = id
    if links then
      wcs[#wcs + 1] = id .. '|wc'
      wcs[#wcs + 1] = id .. '|g'
      fields[#fields + 1] = id .. '|wc'
      fields[#fields + 1] = id .. '|wk'
    end
    local t = tenant_of(m)
    per[t] = (per[t] or 0) + 1
    local a = 2 + 3 * (i - 1)
    local keep, res = tonumber(ARGV[a + 1]), ARGV[a + 2]
    if keep > now then
      for _, f in ipairs({id .. '|e', id .. '|m', id .. '|s'}) do fields[#fields + 1] = f end
      redis.call('ZADD', KEYS[10], keep, id)
      if res ~= '' then redis.call('HSET', KEYS[11], id, res) end
    else
      gone[#gone + 1] = id
      if dirty[i] == 0 then
        fields[#fields + 1] = id
      else
        cleaned[#cleaned + 1] = id
        for _, f in ipairs({id, id .. '|r', id .. '|n', id .. '|e', id .. '|d', id .. '|m', id .. '|c', id .. '|p', id .. '|s'}) do fields[#fields + 1] = f end
      end
    end
  end
end
if #held < #ids then redis.call('HINCRBY', KEYS[3], 'late', #ids - #held) end
if #held == 0 then return 0 end
-- Workflow nodes: their children may be ready (lib.lua release_children).
-- Batches (group.lua): their members are handed over; their records go.
-- (One HMGET for both: id|wc, id|g of each held id; forget_batch takes
-- the id|g read.)
-- A queue that never held either skips the lookup (state.links).
local released = 0
if links then
  local links = chunked('HMGET', KEYS[4], wcs)
  for i = 1, #held do
    if links[2 * i - 1] then released = released + release_children(0, held[i]) end
    if links[2 * i] then forget_batch(0, held[i], links[2 * i]) end
  end
end
if released > 0 then wake(0) end
chunked('HDEL', KEYS[5], held)
chunked('ZREM', KEYS[6], held)
chunked('HDEL', KEYS[4], fields)
if #cleaned > 0 then chunked('SREM', KEYS[21], cleaned) end
if redis.call('EXISTS', KEYS[11]) == 1 then chunked('HDEL', KEYS[11], gone) end
local throttled = redis.call('ZCARD', KEYS[17]) > 0
for t, c in pairs(per) do
  redis.call('HINCRBY', KEYS[3], 'a:' .. t, -c)
  redis.call('HINCRBY', KEYS[3], 'c:' .. t, c)
  if throttled then unhold(0, t) end
  release_nodes(0, t, c, throttled)
end
if throttled then unhold(0, QUEUE) end
redis.call('HINCRBY', KEYS[3], 'completed', #held)
redis.call('HINCRBY', KEYS[3], 'processed', #held)
return #held
