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
-- KEYS[7..10]: as quota.lua's KEYS[1..4] (the scope's buckets, and its
--              legacy reservations, sizes and total)
-- ARGV[1..11]: as create.lua
-- ARGV[12]: the task's `q` ("<bytes>:<bucket>", quota.lua's ARGV[2]) when a
--           byte quota applies, else ""
-- ARGV[13]: the active-task limit, or "" for none (KEYS[6] is not touched)
-- ARGV[14]: the byte quota, or "" for none (KEYS[7..10] are not touched)
-- KEYS[11], ARGV[15] (a keyed create only): as create.lua's KEYS[6], ARGV[13],
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

local found = idem_replay(KEYS[11], ARGV[15])
if found then
  return found
end

local admitted, reserved = false, false
local active, bytes = -1, -1
local scope_bytes = { KEYS[7], KEYS[8], KEYS[9], KEYS[10] }
if ARGV[13] ~= '' then
  active = admit({ KEYS[6] }, { ARGV[13], ARGV[1], ARGV[11], ARGV[6] })
  if active == 0 then
    return -1
  end
  admitted = true
end
local entry = -2
if ARGV[14] ~= '' then
  bytes = quota(scope_bytes, { ARGV[14], ARGV[12], ARGV[11] })
  reserved = bytes ~= 0
end
if ARGV[14] == '' or reserved then
  entry = create({ KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[11] },
    { ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11],
      reserved and ARGV[12] or '', ARGV[15] })
  if type(entry) == 'string' then
    return { entry, active, bytes }
  end
end
-- Refused (by the byte quota, or the create): what was made is taken back.
-- (Written once here rather than as a function, which every create would
-- pay for as a closure.)
if admitted then
  redis.call('ZREM', KEYS[6], ARGV[1])
  know(KEYS[6], 'card', nil) -- counted again by the next admission (group.lua)
end
if reserved then
  local size, bucket = string.match(ARGV[12], '^(%d+):(%S+)$')
  quota_count(scope_bytes, bucket, -tonumber(size))
end
return entry
