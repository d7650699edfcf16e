-- create_scoped.lua: admit.lua, quota.lua and create.lua as one step, for
-- standalone Redis. A scope's keys and a task's keys live in different hash
-- slots, so on a cluster the three run one after another (see `records/limits.rs`
-- and `records/quota.rs`); a standalone server takes them in one script: one round
-- trip instead of three, and no moment at which a crash leaves an admission
-- or a reservation without its task.
--
-- `scripts.rs` puts admit.lua's and create.lua's bodies in front of this
-- one as the local functions `admit` and `create`, each called with its
-- own KEYS and ARGV, and bytes.lua, whose quota_reserve is quota.lua's
-- step, so their logic is written once.
--
-- KEYS[1..6], ARGV[1..13]: as create.lua, so create_scoped hands its own
--             KEYS and ARGV to `create` (no copy): the task key, work
--             stream, wake channel, the tenant's task index, the partition's
--             tenants, the idempotency record (for an unkeyed create any
--             name, never touched, with ARGV[13] ""); ARGV[12] is the task's `q`
--             ("<bytes>:<bucket>", quota.lua's ARGV[2]) when a byte quota
--             applies, else "", and ARGV[13] a keyed create's fingerprint,
--             else "": a keyed create is asked first, so a replay is
--             answered before any limit is checked (the task it names is
--             counted already)
-- KEYS[7]: as admit.lua's KEYS[1] (the scope's active set)
-- KEYS[8]: as quota.lua's KEYS[1] (the scope's buckets)
-- ARGV[14]: the active-task limit, or "" for none (KEYS[7] is not touched)
-- ARGV[15]: the byte quota, or "" for none (KEYS[8] is not touched)
-- Returns: as create.lua, except that an entry id comes as {entry id, the
--          scope's active tasks with this one (admit.lua's reply, -1 without
--          a limit), its reserved bytes with this task's (quota.lua's reply,
--          -1 without a quota)}, for the quota-use metric; or -1 when the
--          active-task limit refuses, -2 when the byte quota does. Nothing
--          stays written unless an entry id is returned: an admission or
--          reservation made before a refusal is taken back here, as
--          `forget.lua` and `resize.lua` do on a cluster.

local found = idem_replay(KEYS[6], ARGV[13])
if found then
  return found
end

local admitted, reserved = false, false
local active, bytes = -1, -1
if ARGV[14] ~= '' then
  active = admit({ KEYS[7] }, { ARGV[14], ARGV[1], ARGV[11], ARGV[6] })
  if active == 0 then
    return -1
  end
  admitted = true
end
local entry = -2
local size, bucket
if ARGV[15] ~= '' then
  size, bucket = string.match(ARGV[12], '^(%d+):(%S+)$')
  size = tonumber(size)
  bytes = quota_reserve(KEYS[8], size, bucket, group_number(ARGV[15]), ARGV[11])
  reserved = bytes ~= 0
end
if ARGV[15] == '' or reserved then
  entry = create(KEYS, ARGV)
  if type(entry) == 'string' then
    return { entry, active, bytes }
  end
end
-- Refused (by the byte quota, or the create): what was made is taken back.
-- (Written once here rather than as a function, which every create would
-- pay for as a closure.)
if admitted then
  active_remove(KEYS[7], ARGV[1])
  know(KEYS[7], 'card', nil) -- counted again by the next admission (group.lua)
end
if reserved then
  quota_count(KEYS[8], bucket, -size)
end
return entry
