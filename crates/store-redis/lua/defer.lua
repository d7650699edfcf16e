-- defer.lua: a worker's compare-and-set that puts a task's work off (a try
-- failed in a way worth trying again): the task (still working, computed by
-- the reducer's `Defer`) is written as transition.lua writes it, and its
-- work entry leaves the stream (XACK + XDEL) for the partition's delayed
-- set, scored by when it is due. `promote.lua` queues it again then. The
-- entry is removed and the member added in the same step, so the work is
-- always in exactly one of the two.
--
-- KEYS[1]: task key       {prefix}:{pNN}:task:<id> (see task.lua)
-- KEYS[2]: events channel {prefix}:{pNN}:events:<id>
-- KEYS[3]: work stream    {prefix}:{pNN}:work
-- KEYS[4]: delayed set    {prefix}:{pNN}:delayed (zset: task id -> due, Unix ms)
-- ARGV[1]: expected stored rev (next.revision - 1)
-- ARGV[2]: the worker's fencing attempt
-- ARGV[3]: new doc (task JSON)
-- ARGV[4]: new rev
-- ARGV[5]: new status (not terminal)
-- ARGV[6]: publish command: "PUBLISH" (standalone) or "SPUBLISH" (cluster)
-- ARGV[7]: consumer group
-- ARGV[8]: the worker's work entry id
-- ARGV[9]: when the work is due, Unix ms
-- ARGV[10]: the task id
-- Returns: {1} written, the work waits; {0, doc} on conflict (rev moved,
--          fence stale, or stored status terminal); {0} when the task is gone.

local rev, attempt, status, string_record = task_head(KEYS[1])
if not rev then
  return {0}
end
if task_over(status) or rev ~= ARGV[1] or attempt ~= ARGV[2] or task_over(ARGV[5]) then
  return {0, task_doc(KEYS[1])}
end
task_store(KEYS[1], ARGV[4], attempt, ARGV[5], ARGV[3], string_record)
redis.call(ARGV[6], KEYS[2], ARGV[3])
redis.call('XACK', KEYS[3], ARGV[7], ARGV[8])
redis.call('XDEL', KEYS[3], ARGV[8])
redis.call('ZADD', KEYS[4], ARGV[9], ARGV[10])
return {1}
