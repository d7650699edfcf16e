-- retry_now.lua: make a task's delayed work due now (an operator's "retry
-- now"): its member in the partition's delayed set gets score `now`, so the
-- next promote.lua queues it. Nothing changes for a task whose work is not
-- waiting (running, queued, or over).
--
-- KEYS[1]: delayed set {prefix}:{pNN}:delayed
-- ARGV[1]: the task id
-- ARGV[2]: now, Unix ms
-- Returns: 1 when the work was waiting (now due), 0 otherwise.

return redis.call('ZADD', KEYS[1], 'XX', 'CH', ARGV[2], ARGV[1])
