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
-- KEYS[4]: the tenant's task index {prefix}:{pNN}:ix:<hex tenant> (stream:
--          one entry `t` = task id per create, in Redis's order), expiring
--          with its last task
-- KEYS[5]: the partition's tenants {prefix}:{pNN}:ixt (sorted set: hex
--          tenant, scored with when its index expires, +inf for never),
--          expiring with its longest-lived index
-- ARGV[9]: "1" to index the task, "" not to (`--task-index off`)
-- ARGV[10]: the hex tenant
-- ARGV[11]: now, Unix ms
-- KEYS[6], ARGV[12] (a keyed create only): its idempotency record (see
--          idempotency.lua) and the request's fingerprint
-- Returns: the work entry id; nil when KEYS[1] already exists; 0 when the work
--          stream is full; {'replay', doc} when the key names a live task made
--          by the same request; -3 when by another. Nothing is written unless
--          an entry id is returned.

if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local found = idem_replay(KEYS[6], ARGV[12])
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
if KEYS[6] then
  idem_record(KEYS[6], ARGV[12], KEYS[1], ARGV[6])
end

if ARGV[7] ~= '' then
  redis.call(ARGV[7], KEYS[3], '1')
end

-- The admin listing's index: a stream, whose entries cost a few dozen
-- bytes (a sorted set's, over a hundred). Its two oldest entries are dropped
-- when their task is gone, so an index fed steadily stays the size of its
-- live tasks; the whole key expires with the last task it names.
if ARGV[9] == '' then
  return entry
end
local index, expiry = KEYS[4], ARGV[6]
local existed = redis.call('EXISTS', index) == 1
local index_expiry = existed and redis.call('PEXPIRETIME', index) or -2
local task_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #ARGV[1])
for _, e in ipairs(existed and redis.call('XRANGE', index, '-', '+', 'COUNT', 2) or {}) do
  if redis.call('EXISTS', task_prefix .. e[2][2]) == 0 then
    redis.call('XDEL', index, e[1])
  end
end
redis.call('XADD', index, '*', 't', ARGV[1])
if expiry == '' then
  redis.call('PERSIST', index)
  redis.call('ZADD', KEYS[5], 'GT', 'inf', ARGV[10])
elseif not existed or (index_expiry >= 0 and index_expiry < tonumber(expiry)) then
  redis.call('PEXPIREAT', index, expiry)
  redis.call('ZADD', KEYS[5], 'GT', expiry, ARGV[10])
end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[11])
-- The tenants' set lives as long as its longest-lived index.
local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')[2]
if last == 'inf' then
  redis.call('PERSIST', KEYS[5])
elseif last then
  redis.call('PEXPIREAT', KEYS[5], last)
end
return entry
