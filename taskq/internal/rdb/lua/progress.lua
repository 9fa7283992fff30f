-- progress: record the progress a running task's handler reports.
-- KEYS: the queue's 21 keys. ARGV: id, value (JSON)
-- Returns 1, or 0 if the task is not running (it ended or was cancelled):
-- nothing is written for a task that is gone.
if redis.call('HEXISTS', KEYS[5], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[4], ARGV[1] .. '|p', ARGV[2])
extra(0, ARGV[1])
return 1
