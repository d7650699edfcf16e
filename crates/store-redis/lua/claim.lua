-- claim.lua: take a delivered work entry: bump the task's fencing attempt
-- (and rev) with a compare-and-set on rev, lease the entry to the claimer,
-- and publish the new snapshot; or drop the entry when the task is terminal
-- or gone. The new doc is computed in Rust, so it stays consistent.
--
-- The lease lives in the entry's idle time: XAUTOCLAIM recovers entries idle
-- for at least the horizon H (`max_lease`), so setting IDLE to H - lease
-- makes the entry recoverable exactly when the lease ends.
--
-- Only the consumer the entry is pending for may claim it: once another
-- worker recovered the entry (its reader stalled past one lease between
-- delivery and this script), the late reader loses and drops it.
--
-- KEYS[1]: task key        {prefix}:{pNN}:task:<id> (see task.lua)
-- KEYS[2]: work stream     {prefix}:{pNN}:work
-- KEYS[3]: events channel  {prefix}:{pNN}:events:<id>
-- KEYS[4]: claimed channel {prefix}:{pNN}:claimed (see transition.lua): a
--          claim of a task claimed before (attempt > 0) is published there
--          too, as "<task id>\n<doc>", so the earlier holder hears that it
--          was fenced out
-- ARGV[1]: consumer group
-- ARGV[2]: work entry id
-- ARGV[3]: consumer (the claiming worker)
-- ARGV[4]: expected stored rev
-- ARGV[5]: new doc (task JSON with attempt + 1, rev + 1)
-- ARGV[6]: new rev
-- ARGV[7]: new attempt (the doc's at ARGV[4] + 1: "1" for a first claim)
-- ARGV[8]: idle time to set, ms (H - lease)
-- ARGV[9]: publish command: "PUBLISH" (standalone) or "SPUBLISH" (cluster)
-- Returns: {1} claimed; {-1} dropped (task terminal or gone: entry acked and
--          deleted; or the entry is no longer pending for this consumer);
--          {0, doc} when rev
--          moved (re-read and retry).

-- The stored attempt is not read: when the rev matches, it is the one of
-- the doc the new one was made from, one below ARGV[7] (task.lua,
-- task_rev_status).
local rev, status, string_record = task_rev_status(KEYS[1])
if not rev or task_over(status) then
  redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
  redis.call('XDEL', KEYS[2], ARGV[2])
  return {-1}
end
if rev ~= ARGV[4] then
  return {0, task_doc(KEYS[1])}
end
local pending = redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 or pending[1][2] ~= ARGV[3] then
  return {-1}
end
redis.call('XCLAIM', KEYS[2], ARGV[1], ARGV[3], 0, ARGV[2], 'IDLE', ARGV[8], 'JUSTID')
task_store(KEYS[1], ARGV[6], ARGV[7], string_record and status or nil, ARGV[5], string_record)
redis.call(ARGV[9], KEYS[3], ARGV[5])
if ARGV[7] ~= '1' then
  redis.call(ARGV[9], KEYS[4], string.match(KEYS[1], '[^:]+$') .. '\n' .. ARGV[5])
end
return {1}
