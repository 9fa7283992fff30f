-- lib.lua is prepended to every operation script (it is not an operation).
--
-- Every queue's keys share the hash tag {queue} and arrive as 21 consecutive
-- KEYS, in the order of rdb.queueKeys:
--   +1 pending   ZSET, all scores 0, member = tenant \0 prio(2 hex, inverted) seq(8 digits) \0 id
--                (lexicographic order = FIFO per tenant, higher priority first)
--   +2 tenants   ZSET tenant -> virtual start tag of its head task (only tenants with pending work)
--   +3 state     HASH vt, seq, counters, w:<t> weight, f:<t> last finish tag, a:<t> active, c:<t> completed,
--                links (the queue has held a workflow node or a batch: acks look for their links),
--                pause (queue paused until ms), p:<t> (tenant paused until ms); for the tenant
--                tree (+20): vt:<node/>, n:<node>, f:<node/>, a:<node/> (inner nodes end in '/')
--   +4 tasks     HASH id -> "\1" tenant \0 prio seq message (the member up to the seq, then the
--                message: member_of); id|r retried, id|n lost starts (lost_start), id|e last
--                error, id|d dead reason, id|m member (only of a task stored by an earlier
--                release: its value is the bare message), id|c who cancelled it and when, id|p progress
--                (JSON, from the handler), id|s snoozes; a workflow node's id|wp (parents not yet
--                succeeded) and id|wc (its children)
--   +5 active    HASH id -> member (tasks a worker holds)
--   +6 lease     ZSET id -> lease expiry (ms)
--   +7 scheduled ZSET member -> due time (ms)
--   +8 retry     ZSET member -> due time (ms)
--   +9 dead      ZSET id -> time of death (ms)
--   +10 completed ZSET id -> expiry of the retained record (ms)
--   +11 results  HASH id -> result bytes
--   +12 wake     LIST of wake-up tokens idle workers BLPOP on
--   +13 cancelled ZSET id -> time cancelled (ms)
--   +14 uniq      HASH unique key -> id of the task holding it
--   +15 uniqexp   ZSET unique key -> when it stops holding (ms)
--   +16 limits    HASH q -> "rate burst max" of the whole queue, t:<tenant> -> "rate burst max weight"
--                 (rate per second, 0 = none; weight 0 = the enqueues' weight); tok:q and
--                 tok:t:<tenant> -> "tokens at_ms", the token buckets
--   +17 throttled ZSET tenant -> when it may be served again (ms; HELD: when one of its running tasks
--                 ends); member "\0q" = the queue's own in-flight cap is reached
--   +18 groups    ZSET group key -> when its members are due to be handed over as one batch (ms):
--                 min(first + max delay, last + grace); the group itself is tasks' g:<key> (member
--                 ids) and g:<key>|t ("first count max_size grace_ms delay_ms")
--   +19 workflows ZSET workflow id -> when it was enqueued (ms); its record (JSON: node name -> task
--                 id) is tasks' wf:<id>, both kept for the dead retention (maintain.lua)
--   +20 tree      ZSET the tenant tree's inner nodes' children by tag (see tree_*)
--   +21 extras    SET ids of the tasks that may have fields beside their stored value in tasks
--                 (id|r, id|p, …; every script creating one adds the id: extra). A task not in it
--                 has none, so dequeue reads only its value (not id|r, id|n) and ack deletes only
--                 it (not eight more names), none of them built (a quarter of Redis's CPU a
--                 task). Trusted once state has xt: set by every script adding tasks to a queue
--                 with no tasks hash (track_new), or by the maintainer's scan (track.lua) of a
--                 queue an earlier release wrote.
-- A throttled tenant leaves tenants (so it never blocks the others) and
-- keeps its tag in f:<tenant>; the dequeue takes it back once due.
local NKEYS = 21

-- A paused tenant stays in tenants with its tag raised above PAUSED, so the
-- dequeue, which takes the smallest tag, reaches it only when every
-- unpaused tenant is drained, and then resumes it if its pause is over.
local PAUSED = 1e15

-- HELD is the throttled score of a tenant (or "\0q", the queue) at its
-- in-flight cap: release makes it due.
local HELD = 1e15
local QUEUE = '\0q'

local function tenant_of(member)
  return string.match(member, '^([^%z]*)')
end

local function id_of(member)
  return string.match(member, '%z([^%z]*)$')
end

-- start_tag is the virtual start tag of a tenant that (re)enters tenants:
-- max(queue virtual time, the tenant's last finish).
local function start_tag(k, t)
  local vt = tonumber(redis.call('HGET', KEYS[k + 3], 'vt') or '0')
  local f = tonumber(redis.call('HGET', KEYS[k + 3], 'f:' .. t) or '0')
  if f > vt then return f end
  return vt
end

-- Hierarchical tenants: a tenant with a '/' is a path (org/team/user, at
-- most 4 segments), a leaf of a tree whose inner nodes are its prefixes
-- ending in '/' ("org/", "org/team/"). The root's children are the members
-- of tenants (flat tenants and top nodes "org/"); an inner node p's active
-- children are tree's members p \0 tag_key(tag) \0 child (ZRANGEBYLEX gives
-- the smallest tag), each child's exact tag in state's n:<child>. An inner
-- node has its own virtual time vt:<p>; f:<node> is a node's last finish.
-- A node's weight is its limits' t:<name> weight (name without the '/'),
-- else a leaf's w:<t>, else 1; an inner node's rate and in-flight cap (the
-- same t:<name>, bucket tok:t:<name>, running tasks a:<name/>) hold for
-- the tenants below it: out of room, it is parked in throttled as name/.
local function is_path(t)
  return string.find(t, '/', 1, true) ~= nil
end

-- parent_of is the inner node holding node name ('' = the root).
local function parent_of(name)
  if string.sub(name, -1) == '/' then name = string.sub(name, 1, -2) end
  return string.match(name, '^(.*/)[^/]*$') or ''
end

local function tag_key(tag)
  return string.format('%020.6f', tag)
end

local function vt_field(p)
  if p == '' then return 'vt' end
  return 'vt:' .. p
end

-- node_tag is node name's tag in its parent, or nil when it is not active.
local function node_tag(k, name)
  local v
  if parent_of(name) == '' then
    v = redis.call('ZSCORE', KEYS[k + 2], name)
  else
    v = redis.call('HGET', KEYS[k + 3], 'n:' .. name)
  end
  return v and tonumber(v) or nil
end

-- node_set moves node name (tag old, nil if not active) to tag.
local function node_set(k, name, old, tag)
  local p = parent_of(name)
  if p == '' then
    redis.call('ZADD', KEYS[k + 2], tag, name)
    return
  end
  if old then redis.call('ZREM', KEYS[k + 20], p .. '\0' .. tag_key(old) .. '\0' .. name) end
  redis.call('ZADD', KEYS[k + 20], 0, p .. '\0' .. tag_key(tag) .. '\0' .. name)
  -- 17 digits: tonumber gives tag back, so the member is found again.
  redis.call('HSET', KEYS[k + 3], 'n:' .. name, string.format('%.17g', tag))
end

-- first_child is inner node p's child with the smallest tag (skip 1: the
-- second): name, tag; nil if none.
local function first_child(k, p, skip)
  while true do
    local c = redis.call('ZRANGEBYLEX', KEYS[k + 20], '[' .. p .. '\0', '(' .. p .. '\1', 'LIMIT', skip or 0, 1)
    if #c == 0 then return nil end
    local name = string.sub(c[1], string.find(c[1], '\0', #p + 2, true) + 1)
    local tag = redis.call('HGET', KEYS[k + 3], 'n:' .. name)
    if tag then return name, tonumber(tag) end
    -- A member whose node has no tag is stale (the node left): drop it,
    -- never serve it as a node at tag 0.
    redis.call('ZREM', KEYS[k + 20], c[1])
  end
end

-- tree_activate makes node name active at max(its parent's virtual time,
-- its last finish), and its parents up to the first active one: an idle
-- subtree starts "now", as a flat tenant does.
local function tree_activate(k, name)
  while true do
    if node_tag(k, name) then return end -- already active: its one place stays
    local p = parent_of(name)
    local vt = tonumber(redis.call('HGET', KEYS[k + 3], vt_field(p)) or '0')
    local f = tonumber(redis.call('HGET', KEYS[k + 3], 'f:' .. name) or '0')
    -- A parent parked at its limits re-enters when it is due (unpark_due).
    local active = p ~= '' and (node_tag(k, p) or redis.call('ZSCORE', KEYS[k + 17], p))
    node_set(k, name, nil, math.max(vt, f))
    if p == '' or active then return end
    name = p
  end
end

-- node_drop takes node name (tag old) out of its parent, its last finish f.
local function node_drop(k, name, old, f)
  local p = parent_of(name)
  if p == '' then
    redis.call('ZREM', KEYS[k + 2], name)
  else
    if old then redis.call('ZREM', KEYS[k + 20], p .. '\0' .. tag_key(old) .. '\0' .. name) end
    redis.call('HDEL', KEYS[k + 3], 'n:' .. name)
  end
  -- A node that was not active keeps the last finish it had.
  if f or old then redis.call('HSET', KEYS[k + 3], 'f:' .. name, f or old) end
end

-- tree_remove takes node name out of its parent, its last finish f (nil:
-- its tag), and every parent left without an active child.
local function tree_remove(k, name, f)
  while true do
    local p = parent_of(name)
    local old = node_tag(k, name)
    node_drop(k, name, old, f)
    -- A node that was not in the tree (parked, paused) leaves its parents
    -- as they are.
    if not old or p == '' or first_child(k, p) then return end
    name, f = p, nil
  end
end

-- queued reports whether tenant t has its place: a tag in tenants (or, a
-- path, in the tree).
local function queued(k, t)
  if redis.call('ZSCORE', KEYS[k + 2], t) then return true end
  return is_path(t) and redis.call('HEXISTS', KEYS[k + 3], 'n:' .. t) == 1
end

-- enter gives tenant t (with pending work, not queued) its place: a paused
-- tenant waits in tenants above PAUSED (a path one too: its pause takes it
-- out of the tree), a path enters the tree, a flat tenant tenants.
local function enter(k, t)
  local paused = redis.call('HEXISTS', KEYS[k + 3], 'p:' .. t) == 1
  if is_path(t) and not paused then
    tree_activate(k, t)
    return
  end
  local tag = start_tag(k, t)
  if paused then tag = tag + PAUSED end
  redis.call('ZADD', KEYS[k + 2], tag, t)
end

-- activate puts member into pending and gives its tenant a virtual start tag
-- if the tenant had no backlog: max(queue virtual time, tenant's last finish).
-- This is start-time fair queuing: a newly active tenant starts "now", so a
-- small tenant behind a huge backlog is served at once.
local function activate(k, member)
  local t = tenant_of(member)
  redis.call('ZADD', KEYS[k + 1], 0, member)
  if not queued(k, t) and not redis.call('ZSCORE', KEYS[k + 17], t) then enter(k, t) end
end

-- resume_tenants ends the tenant pauses due at now (all of them if now is
-- false) and gives each tenant with pending work its tag back; returns how
-- many it resumed.
local function resume_tenants(k, now)
  local n = 0
  for _, t in ipairs(redis.call('ZRANGEBYSCORE', KEYS[k + 2], PAUSED, '+inf')) do
    local untl = tonumber(redis.call('HGET', KEYS[k + 3], 'p:' .. t) or '0')
    if not now or untl <= now then
      redis.call('HDEL', KEYS[k + 3], 'p:' .. t)
      if is_path(t) then
        redis.call('ZREM', KEYS[k + 2], t)
        tree_activate(k, t)
      else
        redis.call('ZADD', KEYS[k + 2], start_tag(k, t), t)
      end
      n = n + 1
    end
  end
  return n
end

-- queue_paused reports whether the queue is paused at now, ending a pause
-- that is over.
local function queue_paused(k, now)
  local untl = redis.call('HGET', KEYS[k + 3], 'pause')
  if not untl then return false end
  if tonumber(untl) > now then return true end
  redis.call('HDEL', KEYS[k + 3], 'pause')
  return false
end

-- promote moves due scheduled and retry tasks into pending (at most limit each).
local function promote(k, now, limit)
  local n = 0
  for _, src in ipairs({k + 7, k + 8}) do
    local due = redis.call('ZRANGEBYSCORE', KEYS[src], '-inf', now, 'LIMIT', 0, limit)
    for _, m in ipairs(due) do
      redis.call('ZREM', KEYS[src], m)
      activate(k, m)
      n = n + 1
    end
  end
  return n
end

local function wake(k)
  redis.call('LPUSH', KEYS[k + 12], '1')
  redis.call('LTRIM', KEYS[k + 12], 0, 63)
end

-- unhold makes a tenant (or QUEUE) throttled at its in-flight cap due
-- now, and wakes a worker to take it back: one of its tasks ended.
local function unhold(k, who)
  local s = redis.call('ZSCORE', KEYS[k + 17], who)
  if s and tonumber(s) >= HELD then
    redis.call('ZADD', KEYS[k + 17], 0, who)
    wake(k)
  end
end

-- release_nodes counts c tasks of path tenant t as ended at each inner
-- node above it (a:<node>, their in-flight count), and with held makes a
-- node held at its cap due.
local function release_nodes(k, t, c, held)
  for i in string.gmatch(t, '()/') do
    local p = string.sub(t, 1, i)
    -- Never below 0: a tenant with a '/' served as a flat one before the
    -- tree (an earlier release's) was never counted in its nodes.
    if redis.call('HINCRBY', KEYS[k + 3], 'a:' .. p, -c) < 0 then redis.call('HSET', KEYS[k + 3], 'a:' .. p, 0) end
    if held then unhold(k, p) end
  end
end

-- release takes id out of active/lease and returns its member (false if the
-- worker no longer holds it: its lease expired and the reaper took it back).
local function release(k, id)
  local m = redis.call('HGET', KEYS[k + 5], id)
  if not m then return false end
  redis.call('HDEL', KEYS[k + 5], id)
  redis.call('ZREM', KEYS[k + 6], id)
  local t = tenant_of(m)
  redis.call('HINCRBY', KEYS[k + 3], 'a:' .. t, -1)
  local held = redis.call('ZCARD', KEYS[k + 17]) > 0
  release_nodes(k, t, 1, held)
  -- A tenant (or the queue) held at its in-flight cap may run again.
  if held then
    unhold(k, t)
    unhold(k, QUEUE)
  end
  return m
end

-- extra records that task id may now have fields beside its stored value
-- (+21 extras); every script that writes one calls it.
local function extra(k, id)
  redis.call('SADD', KEYS[k + 21], id)
end

-- extras_tracked reports whether +21 extras holds every task with extra
-- fields (state's xt): a queue written by an earlier release is scanned
-- first (track.lua), and until then every task is taken to have some.
local function extras_tracked(k)
  return redis.call('HEXISTS', KEYS[k + 3], 'xt') == 1
end

-- track_new makes a queue with no tasks hash trust its extras set from
-- its first task on: it has no task with extra fields. Every script that
-- adds tasks calls it first.
local function track_new(k)
  if redis.call('EXISTS', KEYS[k + 4]) == 0 then redis.call('HSET', KEYS[k + 3], 'xt', 1) end
end

-- lost_start counts a start of id whose lease was lost (the reaper took it
-- back): id|n is the lost starts, negative until the next start counts
-- itself as a re-delivery and turns it positive (dequeue.lua). A task's
-- starts are its attempts (id|r + 1) plus its lost starts; a clean start
-- writes nothing.
local function lost_start(k, id)
  local n = tonumber(redis.call('HGET', KEYS[k + 4], id .. '|n') or '0')
  redis.call('HSET', KEYS[k + 4], id .. '|n', -(math.abs(n) + 1))
  extra(k, id)
end

-- forget_batch drops the records of batch id's members: ids, its id|g
-- (read here unless the caller passes the value it read).
local function forget_batch(k, id, ids)
  ids = ids or redis.call('HGET', KEYS[k + 4], id .. '|g')
  if not ids then return end
  for m in string.gmatch(ids, '%S+') do
    redis.call('HDEL', KEYS[k + 4], m, m .. '|r', m .. '|n', m .. '|e', m .. '|d', m .. '|m', m .. '|c', m .. '|p', m .. '|s')
    redis.call('SREM', KEYS[k + 21], m)
  end
  redis.call('HDEL', KEYS[k + 4], id .. '|g')
end

local function forget(k, id)
  forget_batch(k, id)
  redis.call('HDEL', KEYS[k + 4], id, id .. '|r', id .. '|n', id .. '|e', id .. '|d', id .. '|m', id .. '|c', id .. '|p', id .. '|s', id .. '|wc', id .. '|wp', id .. '|wk')
  redis.call('SREM', KEYS[k + 21], id)
  redis.call('HDEL', KEYS[k + 11], id)
end

-- seq_digits is the seq of a member: 8 base-64 digits, most significant
-- first, each the byte '0' + its value ('0'..'o', bytes in digit order), so
-- that the lexicographic order of members is the enqueue order (for 64^8,
-- 2.8e14, enqueues into a queue). Members of earlier releases had 16 hex
-- digits: while a queue's seq is below 2^32 their first 8 are '0', so they
-- sort before every member written since (FIFO holds across an upgrade).
local function seq_digits(n)
  local d = {}
  for i = 8, 1, -1 do
    d[i] = string.char(48 + n % 64)
    n = math.floor(n / 64)
  end
  return table.concat(d)
end

-- add_task stores a task and makes it pending (or scheduled, if due > now);
-- returns 1, or 0 if the id exists. The caller wakes idle workers. The
-- stored value is "\1" .. the member up to the seq .. msg (see member_of).
local function add_task(k, now, id, msg, t, w, prio, due)
  if redis.call('HEXISTS', KEYS[k + 4], id) == 1 then return 0 end
  local seq = redis.call('HINCRBY', KEYS[k + 3], 'seq', 1)
  local head = t .. '\0' .. prio .. seq_digits(seq)
  redis.call('HSET', KEYS[k + 4], id, '\1' .. head .. msg)
  local member = head .. '\0' .. id
  if w > 0 then
    redis.call('HSET', KEYS[k + 3], 'w:' .. t, w)
  elseif not redis.call('HGET', KEYS[k + 3], 'w:' .. t) then
    redis.call('HSET', KEYS[k + 3], 'w:' .. t, 1)
  end
  redis.call('HINCRBY', KEYS[k + 3], 'enqueued', 1)
  if due > now then
    redis.call('ZADD', KEYS[k + 7], due, member)
  else
    activate(k, member)
  end
  return 1
end

-- head_end is where the head of a stored value ends ("\1" tenant \0, then
-- prio and seq: 10 bytes), or nil for a value without one (stored by an
-- earlier release).
local function head_end(v)
  if not v or string.byte(v, 1) ~= 1 then return nil end
  local z = string.find(v, '\0', 2, true)
  if not z or #v < z + 10 then return nil end
  return z + 10
end

-- member_of is id's member: derived from the head of its stored value,
-- else its id|m (the previous release recorded it there), else false (the
-- release before recorded none).
local function member_of(k, id)
  local v = redis.call('HGET', KEYS[k + 4], id)
  local e = head_end(v)
  if e then return string.sub(v, 2, e) .. '\0' .. id end
  return redis.call('HGET', KEYS[k + 4], id .. '|m')
end

-- expire_unique drops up to limit unique keys whose hold ended by now.
local function expire_unique(k, now, limit)
  local keys = redis.call('ZRANGEBYSCORE', KEYS[k + 15], '-inf', now, 'LIMIT', 0, limit)
  for _, u in ipairs(keys) do
    redis.call('HDEL', KEYS[k + 14], u)
    redis.call('ZREM', KEYS[k + 15], u)
  end
  return #keys
end

-- parse_limit reads a limits value: rate, burst, max, weight (0 = none).
local function parse_limit(v)
  local r, b, m, w = string.match(v, '^(%S+) (%S+) (%S+) ?(%S*)$')
  return tonumber(r) or 0, tonumber(b) or 1, tonumber(m) or 0, tonumber(w) or 0
end

-- bucket returns the tokens of a token bucket at now (full when new).
local function bucket(k, field, rate, burst, now)
  local v = redis.call('HGET', KEYS[k + 16], field)
  if not v then return burst end
  local tok, at = string.match(v, '^(%S+) (%S+)$')
  return math.min(burst, tonumber(tok) + math.max(0, now - tonumber(at)) * rate / 1000)
end

-- next_token is when a bucket holding tok tokens has one.
local function next_token(now, tok, rate)
  return now + math.max(1, math.ceil((1 - tok) * 1000 / rate))
end

-- allowance checks a limit against the in-flight count active: how many
-- tasks may start now (0: none, until wait; HELD: until a running task
-- ends) and the bucket's tokens (nil without a rate). Nothing is spent.
local function allowance(k, field, lim, active, now)
  local rate, burst, mx = parse_limit(lim)
  local room = math.huge
  if mx > 0 then
    room = mx - active
    if room <= 0 then return 0, HELD end
  end
  if rate <= 0 then return room, 0 end
  local tok = bucket(k, field, rate, burst, now)
  if tok < 1 then return 0, next_token(now, tok, rate) end
  return math.min(room, math.floor(tok)), 0, tok
end

-- spend takes count tokens from a bucket that held tok at now.
local function spend(k, field, tok, count, now)
  if tok then redis.call('HSET', KEYS[k + 16], field, string.format('%.6f %d', tok - count, now)) end
end

-- park throttles tenant t (tag s) until untl.
local function park(k, t, s, untl)
  if is_path(t) then
    tree_remove(k, t, s)
  else
    redis.call('ZREM', KEYS[k + 2], t)
    redis.call('HSET', KEYS[k + 3], 'f:' .. t, s)
  end
  redis.call('ZADD', KEYS[k + 17], untl, t)
end

-- unpark_due gives the throttled tenants due at now their place back (or
-- every one of them if now is false: the limits changed).
local function unpark_due(k, now)
  local due
  if now then
    due = redis.call('ZRANGEBYSCORE', KEYS[k + 17], '-inf', now, 'LIMIT', 0, 100)
  else
    due = redis.call('ZRANGE', KEYS[k + 17], 0, -1)
  end
  for _, t in ipairs(due) do
    redis.call('ZREM', KEYS[k + 17], t)
    if string.sub(t, -1) == '/' then
      -- An inner node of the tenant tree, parked at its limits.
      if not node_tag(k, t) and first_child(k, t) then tree_activate(k, t) end
    elseif t ~= QUEUE and not queued(k, t) and
        #redis.call('ZRANGEBYLEX', KEYS[k + 1], '[' .. t .. '\0', '(' .. t .. '\1', 'LIMIT', 0, 1) > 0 then
      enter(k, t)
    end
  end
  return #due
end

-- chunked runs cmd key args… over list in chunks (Lua's unpack has a
-- stack limit), prefix are the arguments before each chunk's items. It
-- returns the chunks' array replies joined in order (HMGET: one value per
-- item of list, false where missing), or an empty table.
local function chunked(cmd, key, list, prefix)
  if not prefix and #list <= 1000 then
    -- One chunk (a worker's batch): the list and the reply as they are,
    -- no copy of either.
    if #list == 0 then return {} end
    local reply = redis.call(cmd, key, unpack(list))
    if type(reply) == 'table' and reply.ok == nil then return reply end
    return {} -- an integer or a status reply ({ok = 'OK'}), as below
  end
  local out = {}
  for i = 1, #list, 1000 do
    local args = {}
    for _, p in ipairs(prefix or {}) do args[#args + 1] = p end
    for j = i, math.min(i + 999, #list) do args[#args + 1] = list[j] end
    local reply = redis.call(cmd, key, unpack(args))
    if type(reply) == 'table' then
      for _, x in ipairs(reply) do out[#out + 1] = x end
    end
  end
  return out
end

-- Workflows (workflow.lua): a node waits in scheduled at WAITING, which
-- no due time reaches, with id|wp its parents not yet succeeded and id|wc
-- its children (space-separated ids). Its parent's ack releases it when
-- the count reaches 0; a parent that dies or is cancelled cancels it.
local WAITING = 9e15

-- release_children counts one parent of id's children as succeeded and
-- makes pending those that wait for no other; returns how many.
local function release_children(k, id)
  local kids = redis.call('HGET', KEYS[k + 4], id .. '|wc')
  if not kids then return 0 end
  local n = 0
  for c in string.gmatch(kids, '%S+') do
    if redis.call('HEXISTS', KEYS[k + 4], c .. '|wp') == 1 and redis.call('HINCRBY', KEYS[k + 4], c .. '|wp', -1) <= 0 then
      redis.call('HDEL', KEYS[k + 4], c .. '|wp')
      local m = member_of(k, c)
      if m and redis.call('ZREM', KEYS[k + 7], m) == 1 then
        activate(k, m)
        n = n + 1
      end
    end
  end
  return n
end

-- release_one counts one parent of waiting node c as done and makes it
-- pending if it waits for no other.
local function release_one(k, c)
  if redis.call('HEXISTS', KEYS[k + 4], c .. '|wp') == 1 and redis.call('HINCRBY', KEYS[k + 4], c .. '|wp', -1) <= 0 then
    redis.call('HDEL', KEYS[k + 4], c .. '|wp')
    local m = member_of(k, c)
    if m and redis.call('ZREM', KEYS[k + 7], m) == 1 then
      activate(k, m)
      wake(k)
    end
  end
end

-- cancel_descendants cancels every node still waiting below id (who and
-- when as a cancel's, the reason in its last error); returns how many.
-- With failed (id died), a child that continues on failure (id|wk) counts
-- id as done instead (release_one), and nothing below it is cancelled.
local function cancel_descendants(k, id, now, why, failed)
  local n, todo, seen = 0, {id}, {}
  while #todo > 0 do
    local p = table.remove(todo)
    local kids = redis.call('HGET', KEYS[k + 4], p .. '|wc')
    for c in string.gmatch(kids or '', '%S+') do
      if failed and p == id and redis.call('HEXISTS', KEYS[k + 4], c .. '|wk') == 1 then
        seen[c] = true
        release_one(k, c)
      end
      if not seen[c] then
        seen[c] = true
        local m = member_of(k, c)
        if redis.call('HEXISTS', KEYS[k + 4], c .. '|wp') == 1 and m and redis.call('ZREM', KEYS[k + 7], m) == 1 then
          redis.call('HDEL', KEYS[k + 4], c .. '|wp')
          redis.call('HSET', KEYS[k + 4], c .. '|c', 'workflow\0' .. now, c .. '|e', why)
          extra(k, c)
          redis.call('ZADD', KEYS[k + 13], now, c)
          redis.call('HINCRBY', KEYS[k + 3], 'cancelled', 1)
          n = n + 1
          todo[#todo + 1] = c
        end
      end
    end
  end
  return n
end

-- Groups (group.lua): tasks enqueued with a group key wait in scheduled at
-- WAITING, listed in tasks' g:<key>, until the group is handed over as one
-- batch task: when it reaches its max size (group.lua), or when it is due
-- in groups (maintain.lua). The batch task's message names its members
-- ("batch"), whose records stay until the batch is acknowledged (ack.lua)
-- or forgotten.

-- batch_message is the message of batch bid (members list, group key, made
-- at now) made from its first member's stored value v, in that message's
-- format (taskq's message.go): format 1 ("\1", the type, a JSON object
-- with short keys, then the payload after a NUL: dropped) or the long-key
-- JSON of earlier releases.
local function batch_message(v, bid, list, key, now)
  local body = string.sub(v, (head_end(v) or 0) + 1)
  if string.byte(body, 1) == 1 then
    local j = string.find(body, '{', 2, true)
    local obj = string.sub(body, j, (string.find(body, '\0', j, true) or 0) - 1)
    -- Spliced in, not decoded and encoded again: cjson writes a number
    -- with 14 significant digits (a MaxRetries of math.MaxInt as
    -- 9.2233720368548e+18), which Go cannot read back as an integer. A key
    -- the member already has (e, g) is repeated: Go keeps the last one.
    local add = '"b":' .. cjson.encode(list) .. ',"g":' .. cjson.encode(key) .. ',"e":' .. string.format('%d', now)
    if obj ~= '{}' then add = ',' .. add end
    return string.sub(body, 1, j - 1) .. string.sub(obj, 1, -2) .. add .. '}'
  end
  local msg = cjson.decode(body)
  msg['id'], msg['payload'], msg['batch'], msg['enqueued_at'] = bid, nil, list, now
  msg['group'] = key
  return cjson.encode(msg)
end

-- flush_group makes group key one batch task, pending now: its message is
-- the first member's with a new id, no payload and the member ids; returns
-- the batch's id, or false if the group is empty.
local function flush_group(k, key, now)
  local gk = 'g:' .. key
  local ids = redis.call('HGET', KEYS[k + 4], gk)
  redis.call('HDEL', KEYS[k + 4], gk, gk .. '|t')
  redis.call('ZREM', KEYS[k + 18], key)
  if not ids then return false end
  local members, list = {}, {}
  for id in string.gmatch(ids, '%S+') do
    local m = member_of(k, id)
    if m and redis.call('ZREM', KEYS[k + 7], m) == 1 then
      list[#list + 1] = id
      members[#members + 1] = m
    end
  end
  if #list == 0 then return false end
  local seq = redis.call('HINCRBY', KEYS[k + 3], 'seq', 1)
  local bid = 'batch-' .. string.format('%x', seq) .. '-' .. list[1]
  local msg = batch_message(redis.call('HGET', KEYS[k + 4], list[1]), bid, list, key, now)
  local first = members[1]
  local prio = string.sub(first, #tenant_of(first) + 2, #tenant_of(first) + 3)
  add_task(k, now, bid, msg, tenant_of(first), 0, prio, 0)
  redis.call('HSET', KEYS[k + 4], bid .. '|g', table.concat(list, ' '))
  extra(k, bid)
  redis.call('HSET', KEYS[k + 3], 'links', 1) -- acks look for batches from now on
  return bid
end
