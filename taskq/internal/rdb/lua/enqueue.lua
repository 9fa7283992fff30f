-- enqueue: add one task (or a batch) to one queue.
-- KEYS: the queue's 21 keys (see lib.lua).
-- ARGV: now_ms, then per task 6 values: id, msg, tenant, weight, prio(2 hex), due_ms
-- Returns the number of tasks added; an id that already exists is skipped.
-- Guarantees: atomic per call; the task is pending (or scheduled if due_ms >
-- now_ms) when the reply arrives; one wake-up token per call that made a
-- task pending (none for a call that only scheduled or skipped), for idle
-- workers; the wake list is trimmed to 64 tokens.
local now = tonumber(ARGV[1])
track_new(0)
local added = 0
local woke = false
for i = 2, #ARGV, 6 do
  local due = tonumber(ARGV[i + 5])
  if add_task(0, now, ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4], due) == 1 then
    added = added + 1
    if due <= now then woke = true end
  end
end
if woke then wake(0) end
return added
