-- unique: add one task that holds a unique key, or debounce.
-- KEYS: the queue's 21 keys (see lib.lua).
-- ARGV: now_ms, mode ('unique' | 'debounce'), key, hold_until_ms, then the
--       task's 6 enqueue values: id, msg, tenant, weight, prio(2 hex), due_ms
-- Returns {added (0|1), id, replaced id or ''}:
--   unique:   while another task holds key (until its hold_until, whether
--             that task is pending, running or done), nothing is added and id
--             is the holder's; otherwise the task is added and holds key.
--   debounce: a holder still scheduled (not yet due) is deleted and replaced
--             by this task (its payload, its later due time); the new task
--             holds key until hold_until_ms (the caller passes its due
--             time). A holder no longer scheduled is left as it is (the
--             key passes to the new task).
--   either:   an id that is already another task's is not added ({0, id,
--             ''}) and changes nothing: the holder is replaced only by a
--             task that is added.
-- An unknown mode is an error (nothing changed).
-- Guarantees: atomic: two enqueues with one key never both add.
local now, mode, key, hold = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
local id, msg, t, w, prio, due = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10])
if mode ~= 'unique' and mode ~= 'debounce' then
  return redis.error_reply('ERR unique: mode "' .. mode .. '": want unique or debounce')
end
expire_unique(0, now, 100)
track_new(0)
local holder = redis.call('HGET', KEYS[14], key)
local replaced = ''
if holder and mode == 'unique' then
  return {0, holder, ''}
end
if holder ~= id and redis.call('HEXISTS', KEYS[4], id) == 1 then
  return {0, id, ''}
end
if holder then
  local member = member_of(0, holder)
  if member and redis.call('ZREM', KEYS[7], member) == 1 then
    forget(0, holder)
    redis.call('HINCRBY', KEYS[3], 'debounced', 1)
    replaced = holder
  end
end
if add_task(0, now, id, msg, t, w, prio, due) == 0 then
  return {0, id, replaced}
end
if due <= now then wake(0) end
redis.call('HSET', KEYS[14], key, id)
redis.call('ZADD', KEYS[15], hold, key)
return {1, id, replaced}
