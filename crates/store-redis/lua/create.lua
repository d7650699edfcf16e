-- create.lua: create a task and enqueue its work in one step, so a crash
-- never leaves a task without work or work without a task.
--
-- KEYS[1]: task key     {prefix}:{pNN}:task:<id> (laid out as task.lua says)
-- KEYS[2]: work stream  {prefix}:{pNN}:work
-- KEYS[3]: wake channel {prefix}:{pNN}:wake
-- ARGV[1]: task id (the work entry's `task` field)
-- ARGV[2]: doc: the whole task as JSON
-- ARGV[3]: rev
-- ARGV[4]: attempt
-- ARGV[5]: status
-- ARGV[6]: expiry, Unix ms (PEXPIREAT), or "" when the task never expires
-- ARGV[7]: "SPUBLISH" to wake waiting claimers (cluster mode), or "" (standalone
--          claimers block on the stream itself)
-- ARGV[8]: the most entries the work stream may hold (queued or claimed), or
--          "" for no bound
-- KEYS[4], ARGV[9] (a keyed create only): its idempotency record (see
--          idempotency.lua) and the request's fingerprint
-- Returns: the work entry id; nil when KEYS[1] already exists; 0 when the work
--          stream is full; {'replay', doc} when the key names a live task made
--          by the same request; -3 when by another. Nothing is written unless
--          an entry id is returned.

if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local found = idem_replay(KEYS[4], ARGV[9])
if found then
  return found
end
if ARGV[8] ~= '' and redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[8]) then
  return 0
end
-- The stream entry first: if anything after it failed, a worker would find
-- no task and drop the entry; the reverse would strand a task.
local entry = redis.call('XADD', KEYS[2], '*', 'task', ARGV[1])
task_store(KEYS[1], ARGV[3], ARGV[4], ARGV[5], ARGV[2])
if ARGV[6] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[6])
end
if KEYS[4] then
  idem_record(KEYS[4], ARGV[9], KEYS[1], ARGV[6])
end
if ARGV[7] ~= '' then
  redis.call(ARGV[7], KEYS[3], '1')
end
return entry
