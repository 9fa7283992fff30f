-- dequeue: take up to n tasks from several queues in ONE call.
-- KEYS: 21 keys per queue, queues in the order to serve them (the caller
--       orders them: strict priority, or a weighted shuffle, then steal targets).
-- ARGV: n, now_ms, lease_until_ms, promote_limit
-- Returns a flat array, 7 values per task: queue index (1-based), id, msg
-- ('' if the message is missing), retried, starts (retried + 1 + the lost
-- starts in id|n), tenant (from the member: the message does not carry it), flags
-- (2: a re-delivery after a lost lease); then the earliest time (ms) a throttled
-- tenant or queue may run again, 0 if none waits on a rate; then each
-- queue's pending count after the call, in KEYS order (the caller weighs
-- its next order by the backlog: a ZCARD per queue, no extra round trip).
-- Guarantees: inside a queue, tenants are served in weighted start-time fair
-- order (virtual time advances to the start tag of each served task; a tenant
-- of weight w advances by 1/w per task) and each tenant's tasks in priority,
-- then FIFO order; each O(log n). Every returned task is in active with a
-- lease; a paused queue is skipped and a paused tenant's tasks stay (a
-- pause that is over ends here or in maintain); when work is left in a queue
-- it served and no wake-up token is queued, one token is pushed so another
-- idle worker joins. A task started again after a lost lease (its id|n
-- negative, lib.lua lost_start) is a re-delivery, counted in state.dup.
-- Limits (lib.lua, +16/+17): a tenant at its in-flight cap or out of rate
-- tokens is parked in throttled and the next tenant is served; a queue at
-- its own cap or rate is left for the next queue. An admin weight in the
-- limits overrides the weight the enqueues carry.
-- Cost: the tenant with the smallest tag is served a run of tasks at once,
-- as many as fair order gives it before the next tenant's tag (all of them
-- when it is alone), so a batch from one tenant costs a few calls, not a
-- few per task.
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

-- fair_run is how many tasks tenant t (tag s, weight w) gets in a row,
-- up to room: while its tag stays before the next tenant's (ties go to
-- the smaller name, as the sorted set orders them).
local function fair_run(k, t, s, w, room)
  local second = redis.call('ZRANGE', KEYS[k + 2], 1, 1, 'WITHSCORES')
  if #second == 0 then return room end
  local t2, s2 = second[1], tonumber(second[2])
  local j = 1
  while j < room do
    local tag = s + j / w
    if tag > s2 or (tag == s2 and t > t2) then break end
    j = j + 1
  end
  return j
end

-- node_weight is the weight of tree node name among its siblings: its
-- limits' weight (t:<name> without the trailing '/'), else a leaf's w:<t>.
local function node_weight(k, name)
  local bare = name
  if string.sub(name, -1) == '/' then bare = string.sub(name, 1, -2) end
  local lim = redis.call('HGET', KEYS[k + 16], 't:' .. bare)
  local w = lim and select(4, parse_limit(lim)) or 0
  if w <= 0 and bare == name then w = tonumber(redis.call('HGET', KEYS[k + 3], 'w:' .. name) or '1') end
  if w <= 0 then w = 1 end
  return w
end

-- descend walks from top node t (tag s) to the leaf with the smallest tag
-- at each level: the leaf, its tag and the path of {node, tag, weight}
-- from the top; nil if an inner node had no child (it is dropped).
local function descend(k, t, s)
  local path = {{t, s, node_weight(k, t)}}
  while string.sub(t, -1) == '/' do
    local c, cs = first_child(k, t)
    if not c then
      tree_remove(k, t)
      return nil
    end
    t, s = c, cs
    path[#path + 1] = {t, s, node_weight(k, t)}
  end
  return t, s, path
end

-- tree_run is how many tasks the leaf of path gets in a row, up to room:
-- while every node's tag on the path stays at or before its next sibling's.
local function tree_run(k, path, room)
  for _, e in ipairs(path) do
    local p, t2, s2 = parent_of(e[1]), nil, nil
    if p == '' then
      local second = redis.call('ZRANGE', KEYS[k + 2], 1, 1, 'WITHSCORES')
      if #second > 0 then t2, s2 = second[1], tonumber(second[2]) end
    else
      t2, s2 = first_child(k, p, 1)
    end
    if s2 then
      local j = math.floor((s2 - e[2]) * e[3] + 1e-9) + 1
      -- A tie goes to the smaller name, as the sets order them.
      if j > 1 and math.abs(e[2] + (j - 1) / e[3] - s2) < 1e-9 and e[1] > t2 then j = j - 1 end
      room = math.min(room, math.max(1, j))
    end
  end
  return room
end

-- node_limits applies the limits of path's inner nodes (t:<name> without
-- the '/', a:<name/> their running tasks): how many tasks may start, at
-- most room, and the token buckets to spend; 0 when a node is out of room
-- (it is parked: it leaves the tree until due, wait).
local function node_limits(k, path, room, lims)
  local spends = {}
  for i = 1, #path - 1 do
    local name = path[i][1]
    local bare = string.sub(name, 1, -2)
    if lims[name] == nil then lims[name] = redis.call('HGET', KEYS[k + 16], 't:' .. bare) end
    if lims[name] then
      local act = tonumber(redis.call('HGET', KEYS[k + 3], 'a:' .. name) or '0')
      local allowed, wait, tok = allowance(k, 'tok:t:' .. bare, lims[name], act, now)
      if allowed <= 0 then
        park(k, name, path[i][2], wait)
        return 0, spends, wait
      end
      room = math.min(room, allowed)
      if tok then spends[#spends + 1] = {'tok:t:' .. bare, tok} end
    end
  end
  return room, spends
end

-- tree_advance moves the tags on path after its leaf was served take
-- tasks: each node by take/weight, each parent's virtual time to the last
-- task's start; the leaf leaves the tree without more, a parent without
-- an active child.
local function tree_advance(k, path, take, more)
  local gone = not more
  for i = #path, 1, -1 do
    local name, s, w = path[i][1], path[i][2], path[i][3]
    if i < #path then redis.call('HINCRBY', KEYS[k + 3], 'a:' .. name, take) end
    redis.call('HSET', KEYS[k + 3], vt_field(parent_of(name)), s + (take - 1) / w)
    local f = s + take / w
    if gone and (i == #path or not first_child(k, name)) then
      node_drop(k, name, s, f)
    else
      node_set(k, name, s, f)
      gone = false
    end
  end
end

-- serve leases the run of tenant t's tasks in members (their tag s, weight w)
-- and puts t back at its new tag, or out of tenants if it has no more.
local function serve(k, q, t, s, w, members, more, path)
  local take = #members
  local ids, act, lease = {}, {}, {}
  for i, m in ipairs(members) do
    local id = id_of(m)
    ids[i] = id
    act[#act + 1] = id
    act[#act + 1] = m
    lease[#lease + 1] = until_ms
    lease[#lease + 1] = id
  end
  chunked('ZREM', KEYS[k + 1], members)
  chunked('HSET', KEYS[k + 5], act)
  chunked('ZADD', KEYS[k + 6], lease)
  redis.call('HINCRBY', KEYS[k + 3], 'a:' .. t, take)
  local f = s + take / w
  if path then
    tree_advance(k, path, take, more)
  elseif more then
    redis.call('HSET', KEYS[k + 3], 'vt', s + (take - 1) / w)
    redis.call('ZADD', KEYS[k + 2], f, t)
  else
    redis.call('HSET', KEYS[k + 3], 'vt', s + (take - 1) / w)
    redis.call('ZREM', KEYS[k + 2], t)
    redis.call('HSET', KEYS[k + 3], 'f:' .. t, f)
  end
  -- One read of every task's message, retries and lost starts for the run,
  -- however long; nothing per task is written (a start is counted
  -- only when it is lost: maintain's reaper adds it to id|n).
  -- Each task's value, and its retries and lost starts if it may have
  -- fields beside its value (lib.lua extras): read in one HMGET.
  local dirty = {}
  if extras_tracked(k) then dirty = chunked('SMISMEMBER', KEYS[k + 21], ids) end
  local fields, at = {}, {}
  for i, id in ipairs(ids) do
    at[i] = #fields + 1
    fields[#fields + 1] = id
    if dirty[i] ~= 0 then
      fields[#fields + 1] = id .. '|r'
      fields[#fields + 1] = id .. '|n'
    end
  end
  local v = chunked('HMGET', KEYS[k + 4], fields)
  local dups = 0
  for i, id in ipairs(ids) do
    local b = at[i] - 1
    local r, lost = nil, nil
    if dirty[i] ~= 0 then r, lost = v[b + 2], v[b + 3] end
    local retried = tonumber(r or '0')
    local st, flags = retried + 1, 0
    if lost then
      -- A lost start (lib.lua lost_start): negative until this start, a
      -- re-delivery, counts it.
      local ln = tonumber(lost)
      if ln < 0 then
        dups = dups + 1
        flags = 2
        redis.call('HSET', KEYS[k + 4], id .. '|n', -ln)
      end
      st = st + math.abs(ln)
    end
    local msg = v[b + 1] or ''
    out[#out + 1] = q + 1
    out[#out + 1] = id
    out[#out + 1] = msg
    out[#out + 1] = retried
    out[#out + 1] = st
    out[#out + 1] = t
    out[#out + 1] = flags
  end
  if dups > 0 then redis.call('HINCRBY', KEYS[k + 3], 'dup', dups) end
  got = got + take
end

for q = 0, #KEYS / NKEYS - 1 do
  if got >= n then break end
  local k = q * NKEYS
  local before = got
  local paused = queue_paused(k, now)
  if not paused then promote(k, now, plimit) end
  local qlim = redis.call('HGET', KEYS[k + 16], 'q')
  local lims = {}
  local throttled = redis.call('ZCARD', KEYS[k + 17]) > 0
  if throttled then unpark_due(k, now) end
  while got < n and not paused do
    local room, qtok = n - got, nil
    if qlim then
      local allowed, wait
      allowed, wait, qtok = allowance(k, 'tok:q', qlim, redis.call('HLEN', KEYS[k + 5]), now)
      if allowed <= 0 then
        if redis.call('ZCARD', KEYS[k + 2]) > 0 then
          redis.call('ZADD', KEYS[k + 17], 'GT', wait, QUEUE)
          throttled = true
          note(wait)
        end
        break
      end
      room = math.min(room, allowed)
    end
    local top = redis.call('ZRANGE', KEYS[k + 2], 0, 0, 'WITHSCORES')
    if #top == 0 then break end
    local t, s = top[1], tonumber(top[2])
    if s >= PAUSED then
      -- Every tenant left is paused: resume those whose pause is over.
      if resume_tenants(k, now) == 0 then break end
      top = redis.call('ZRANGE', KEYS[k + 2], 0, 0, 'WITHSCORES')
      -- A resumed path tenant under a parked node went into the tree, not
      -- into tenants: there may be nothing here now.
      if #top == 0 then break end
      t, s = top[1], tonumber(top[2])
      if s >= PAUSED then break end
    end
    -- A top node of the tenant tree ("org/"): descend to its leaf.
    local path
    local spends = {}
    if string.sub(t, -1) == '/' then t, s, path = descend(k, t, s) end
    if t and path then
      local wait
      room, spends, wait = node_limits(k, path, room, lims)
      if room <= 0 then
        t = nil
        throttled = true
        note(wait)
      end
    end
    if t then
      if lims[t] == nil then lims[t] = redis.call('HGET', KEYS[k + 16], 't:' .. t) end
      local lim, ttok = lims[t], nil
      local w = 0
      if lim then
        local allowed, wait
        allowed, wait, ttok = allowance(k, 'tok:t:' .. t, lim, tonumber(redis.call('HGET', KEYS[k + 3], 'a:' .. t) or '0'), now)
        room = math.min(room, allowed)
        if allowed <= 0 then
          park(k, t, s, wait)
          throttled = true
          note(wait)
        end
        w = select(4, parse_limit(lim))
      end
      if room > 0 then
        if w <= 0 then w = tonumber(redis.call('HGET', KEYS[k + 3], 'w:' .. t) or '1') end
        if w <= 0 then w = 1 end
        if path then
          path[#path][3] = w
          room = tree_run(k, path, room)
        else
          room = fair_run(k, t, s, w, room)
        end
        local heads = redis.call('ZRANGEBYLEX', KEYS[k + 1], '[' .. t .. '\0', '(' .. t .. '\1', 'LIMIT', 0, room + 1)
        if #heads == 0 and path then
          tree_remove(k, t)
        elseif #heads == 0 then
          redis.call('ZREM', KEYS[k + 2], t)
        else
          local more = #heads > room
          if more then heads[#heads] = nil end
          serve(k, q, t, s, w, heads, more, path)
          if lim then spend(k, 'tok:t:' .. t, ttok, #heads, now) end
          if qlim then spend(k, 'tok:q', qtok, #heads, now) end
          for _, b in ipairs(spends) do spend(k, b[1], b[2], #heads, now) end
        end
      end
    end
  end
  -- Tell the caller when the first tenant throttled by a rate may run
  -- again: nothing else wakes an idle worker for it.
  if throttled then
    local first = redis.call('ZRANGE', KEYS[k + 17], 0, 0, 'WITHSCORES')
    if #first > 0 then note(tonumber(first[2])) end
  end
  -- Chain wake-up: work is left and no token waits, so wake one more idle
  -- worker (one enqueue call may have added many tasks but one token).
  if got > before and redis.call('ZCARD', KEYS[k + 2]) > 0 and redis.call('LLEN', KEYS[k + 12]) == 0 then
    redis.call('LPUSH', KEYS[k + 12], '1')
  end
end
out[#out + 1] = hint
for q = 0, #KEYS / NKEYS - 1 do
  out[#out + 1] = redis.call('ZCARD', KEYS[q * NKEYS + 1])
end
return out
