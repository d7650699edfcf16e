-- renew.lua: extend a work lease, if the caller still holds the claim (its
-- attempt is the stored one and the entry is still pending). The lease is
-- the entry's idle time: IDLE = H - lease, where H (`max_lease`) is the idle
-- time after which XAUTOCLAIM recovers an entry.
--
-- Its holder check (attempt, then pending entry) is release.lua's too, on
-- purpose: each script must stand alone and check atomically what it changes.
--
-- KEYS[1]: task key     {prefix}:{pNN}:task:<id> (see task.lua)
-- KEYS[2]: work stream  {prefix}:{pNN}:work
-- ARGV[1]: consumer group
-- ARGV[2]: work entry id
-- ARGV[3]: the holder's attempt
-- ARGV[4]: idle time to set, ms (H - lease)
-- Returns: 1 renewed; 0 lost (task gone, attempt moved on, or entry no longer pending).

if select(2, task_head(KEYS[1])) ~= ARGV[3] then
  return 0
end
local pending = redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then
  return 0
end
-- Same consumer, new idle time; the delivery count is unchanged (JUSTID).
redis.call('XCLAIM', KEYS[2], ARGV[1], pending[1][2], 0, ARGV[2],
  'IDLE', ARGV[4], 'JUSTID')
return 1
