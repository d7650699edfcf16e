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
--          a little after its last task (a tenth of its lifetime, a minute
--          at most)
-- KEYS[5]: the partition's tenants {prefix}:{pNN}:ixt (sorted set: hex
--          tenant, scored with when its index expires, +inf for never),
--          expiring with its longest-lived index
-- ARGV[9]: "1" to index the task, "" not to (`--task-index off`)
-- ARGV[10]: the hex tenant
-- ARGV[11]: now, Unix ms
-- ARGV[12]: the task's `q` when its bytes were reserved under its scope's
--          byte quota ("<bytes>:<bucket>", quota.lua's ARGV[2]), kept in its
--          hash (task.lua); "" without
-- KEYS[6], ARGV[13]: a keyed create's idempotency record (see
--          idempotency.lua) and the request's fingerprint; for an unkeyed
--          one, both absent, or ARGV[13] "" (KEYS[6] then unused)
-- Returns: the work entry id; nil when KEYS[1] already exists; 0 when the work
--          stream is full; {'replay', doc} when the key names a live task made
--          by the same request; -3 when by another. Nothing is written unless
--          an entry id is returned.

if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local found = idem_replay(KEYS[6], ARGV[13])
if found then
  return found
end
-- A batch's creates into one stream count it once (group.lua: 'len', then
-- known from their own XADDs; an XDEL of the batch forgets it).
local queued = nil
if ARGV[8] ~= '' then
  queued = known(KEYS[2], 'len') or redis.call('XLEN', KEYS[2])
  if queued >= group_number(ARGV[8]) then
    know(KEYS[2], 'len', queued)
    return 0
  end
end
-- The stream entry first: if anything after it failed, a worker would find
-- no task and drop the entry; the reverse would strand a task.
local entry = redis.call('XADD', KEYS[2], '*', 'task', ARGV[1])
if queued then
  know(KEYS[2], 'len', queued + 1)
end
task_store(KEYS[1], ARGV[3], ARGV[4], ARGV[5], ARGV[2], false, ARGV[12] ~= '' and ARGV[12] or nil)
if ARGV[6] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[6])
end
if ARGV[13] and ARGV[13] ~= '' then
  idem_record(KEYS[6], ARGV[13], KEYS[1], ARGV[6])
end

if ARGV[7] ~= '' then
  redis.call(ARGV[7], KEYS[3], '1')
end

-- The admin listing's index: a stream, whose entries cost a few dozen
-- bytes (a sorted set's, over a hundred). Its oldest entries are dropped
-- while their task is gone: one create in eight (by a character of its
-- random id) looks, dropping up to sixteen, two a create on average, so an
-- index fed steadily stays about the size of its live tasks while seven
-- creates in eight spare the look (two commands). It expires a little
-- after the last task it names (a tenth of that task's lifetime, a minute
-- at most): extending it by that slack at once spares most creates the
-- expiry and tenant-set writes.
if ARGV[9] == '' then
  return entry
end
local index, expiry = KEYS[4], ARGV[6]
-- -2: no index, -1: never expires. A batch's creates of one tenant ask once
-- (group.lua), each later one knowing what the earlier ones set.
local index_expiry = known(index, 'expiry') or know(index, 'expiry', redis.call('PEXPIRETIME', index))
if index_expiry ~= -2 and string.byte(ARGV[1], -2) % 8 == 0 then
  local task_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #ARGV[1])
  for _ = 1, 16 do
    local e = redis.call('XRANGE', index, '-', '+', 'COUNT', 1)[1]
    if not e or redis.call('EXISTS', task_prefix .. e[2][2]) == 1 then
      break
    end
    redis.call('XDEL', index, e[1])
  end
end
redis.call('XADD', index, '*', 't', ARGV[1])
local lasts
if expiry == '' then
  if index_expiry ~= -1 then
    redis.call('PERSIST', index)
    lasts = 'inf'
  end
  know(index, 'expiry', -1)
else
  local at = group_number(expiry) -- admit.lua's, in create_scoped: one tonumber
  if index_expiry == -2 or (index_expiry >= 0 and index_expiry < at) then
    local slack = math.min(60000, math.floor((at - group_number(ARGV[11])) / 10))
    lasts = at + math.max(slack, 0)
    redis.call('PEXPIREAT', index, lasts)
    know(index, 'expiry', lasts)
  end
end
if lasts then
  -- The partition's tenants: this one until its index expires; the set
  -- itself lives as long as its longest-lived index.
  redis.call('ZADD', KEYS[5], 'GT', lasts, ARGV[10])
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[11])
  local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')[2]
  if last == 'inf' then
    redis.call('PERSIST', KEYS[5])
  elseif last then
    redis.call('PEXPIREAT', KEYS[5], last)
  end
end
return entry
