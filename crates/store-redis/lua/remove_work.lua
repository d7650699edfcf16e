-- remove_work.lua: remove the work entry of a finished task (XACK + XDEL), unless a newer
-- claim holds it: a stale holder must not drop work another worker now runs.
--
-- KEYS[1]: task key     {prefix}:{pNN}:task:<id> (see task.lua)
-- KEYS[2]: work stream  {prefix}:{pNN}:work
-- ARGV[1]: consumer group
-- ARGV[2]: work entry id
-- ARGV[3]: the finisher's attempt
-- Returns: 1 removed; 0 left alone (the task runs under a newer attempt).

local rev, attempt, status = task_head(KEYS[1])
if rev and not task_over(status) and attempt ~= ARGV[3] then
  return 0
end
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
return 1
