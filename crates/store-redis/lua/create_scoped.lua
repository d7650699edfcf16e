-- create_scoped.lua: admit.lua, quota.lua and create.lua as one step, for
-- standalone Redis. A scope's keys and a task's keys live in different hash
-- slots, so on a cluster the three run one after another (see `records/limits.rs`
-- and `records/quota.rs`); a standalone server takes them in one script: one round
-- trip instead of three, and no moment at which a crash leaves an admission
-- or a reservation without its task.
--
-- `scripts.rs` puts the three scripts' bodies in front of this one as the
-- local functions `admit`, `quota` and `create`, each called with its own
-- KEYS and ARGV, so their logic is written once.
--
-- KEYS[1..5]: as create.lua (task key, work stream, wake channel, the
--             tenant's task index, the partition's tenants)
-- KEYS[6]: as admit.lua's KEYS[1] (the scope's active set)
-- KEYS[7..9]: as quota.lua's KEYS[1..3] (the scope's reservations, sizes, total)
-- ARGV[1..11]: as create.lua
-- ARGV[12]: the active-task limit, or "" for none (KEYS[6] is not touched)
-- ARGV[13]: the byte quota, or "" for none (KEYS[7..9] are not touched)
-- ARGV[14]: the task's bytes (quota.lua's ARGV[3])
-- ARGV[15]: the task's expiry as a reservation score (quota.lua's ARGV[4])
-- KEYS[10], ARGV[16] (a keyed create only): as create.lua's KEYS[6], ARGV[12],
--          asked first: a replay is answered before any limit is checked
--          (the task it names is counted already)
-- Returns: as create.lua, except that an entry id comes as {entry id, the
--          scope's active tasks with this one (admit.lua's reply, -1 without
--          a limit), its reserved bytes with this task's (quota.lua's reply,
--          -1 without a quota)}, for the quota-use metric; or -1 when the
--          active-task limit refuses, -2 when the byte quota does. Nothing
--          stays written unless an entry id is returned: an admission or
--          reservation made before a refusal is taken back here, as
--          `forget_active`/`unreserve_bytes` do on a cluster.

local found = idem_replay(KEYS[10], ARGV[16])
if found then
  return found
end

local id = ARGV[1]
local admitted, reserved = false, false
local active, bytes = -1, -1
local function undo()
  if admitted then
    redis.call('ZREM', KEYS[6], id)
  end
  if reserved then
    redis.call('ZREM', KEYS[7], id)
    redis.call('HDEL', KEYS[8], id)
    redis.call('DECRBY', KEYS[9], ARGV[14])
  end
end

if ARGV[12] ~= '' then
  active = admit({ KEYS[6] }, { ARGV[12], id, ARGV[11], ARGV[6] })
  if active == 0 then
    return -1
  end
  admitted = true
end
if ARGV[13] ~= '' then
  bytes = quota({ KEYS[7], KEYS[8], KEYS[9] }, { ARGV[13], id, ARGV[14], ARGV[15], ARGV[11] })
  if bytes == 0 then
    undo()
    return -2
  end
  reserved = true
end
local entry = create({ KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[10] },
  { ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[16] })
if type(entry) ~= 'string' then
  undo()
  return entry
end
return { entry, active, bytes }
