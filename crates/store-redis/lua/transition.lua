-- transition.lua: compare-and-set a task computed by the reducer in Rust.
--
-- KEYS[1]: task hash       {prefix}:{pNN}:task:<id>
-- KEYS[2]: events channel  {prefix}:{pNN}:events:<id>
-- ARGV[1]: expected stored rev (next.revision - 1)
-- ARGV[2]: the worker's fencing attempt, or "" for a client write
-- ARGV[3]: new doc (task JSON)
-- ARGV[4]: new rev
-- ARGV[5]: new status
-- ARGV[6]: publish command: "PUBLISH" (standalone) or "SPUBLISH" (cluster)
-- KEYS[3], ARGV[7] (standalone only, where the scope's keys may share a
--          script with the task's): the scope's active set (see admit.lua)
--          and the task id, removed from it when this write ends the task.
--          A cluster removes it in a step of its own (`forget_active`).
-- Returns: {1} when written and published; {0, doc} on conflict (rev moved,
--          fence stale, or stored status terminal), {0} when the task is gone.

local cur = redis.call('HMGET', KEYS[1], 'rev', 'attempt', 'status', 'doc')
if not cur[1] then
  return {0}
end
local status = cur[3]
if status == 'completed' or status == 'failed' or status == 'cancelled' then
  return {0, cur[4]}
end
if cur[1] ~= ARGV[1] then
  return {0, cur[4]}
end
if ARGV[2] ~= '' and cur[2] ~= ARGV[2] then
  return {0, cur[4]}
end
redis.call('HSET', KEYS[1], 'doc', ARGV[3], 'rev', ARGV[4], 'status', ARGV[5])
redis.call(ARGV[6], KEYS[2], ARGV[3])
if KEYS[3] and (ARGV[5] == 'completed' or ARGV[5] == 'failed' or ARGV[5] == 'cancelled') then
  redis.call('ZREM', KEYS[3], ARGV[7])
end
return {1}
