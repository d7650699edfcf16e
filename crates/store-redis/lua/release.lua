-- release.lua: hand unfinished work back so any worker recovers it at once:
-- the entry stays pending (same id, same place) but its last delivery is set
-- to the Unix epoch (XCLAIM ... TIME 0), so its idle time exceeds the
-- recovery horizon and the next claimer's XAUTOCLAIM takes it.
-- Only the current holder (stored attempt) may release.
--
-- Its holder check (attempt, then pending entry) is renew.lua's too, on
-- purpose: each script must stand alone and check atomically what it changes.
--
-- KEYS[1]: task key     {prefix}:{pNN}:task:<id> (see task.lua)
-- KEYS[2]: work stream  {prefix}:{pNN}:work
-- KEYS[3]: wake channel {prefix}:{pNN}:wake
-- ARGV[1]: consumer group
-- ARGV[2]: work entry id
-- ARGV[3]: the holder's attempt
-- ARGV[4]: "SPUBLISH" to wake waiting claimers (cluster mode), or ""
-- Returns: 1 released; 0 not held (nothing changed).

if select(2, task_head(KEYS[1])) ~= ARGV[3] then
  return 0
end
local pending = redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then
  return 0
end
redis.call('XCLAIM', KEYS[2], ARGV[1], pending[1][2], 0, ARGV[2], 'TIME', 0, 'JUSTID')
if ARGV[4] ~= '' then
  redis.call(ARGV[4], KEYS[3], '1')
end
return 1
