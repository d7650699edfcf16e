-- unhold.lua: take up to N held work entries for a worker that has room
-- for their scopes, partition after partition, in one round trip.
--
-- Work a claimer had no room for (its scope was at the worker's fair share)
-- is held, not claimed: the entry stays pending in the group, owned by the
-- consumer `held:<scope hash>` (see keys/mod.rs), so it keeps its id, nothing
-- bumps its attempt, and fresh entries behind it are read at once. This
-- script hands held entries to a worker, skipping the consumers of scopes
-- that have no room on it, taking at most `per` from each held consumer
-- (starting at a rotating offset, so no scope is always served first), and
-- deletes held consumers left with nothing pending.
--
-- A taken entry gets its idle time set to H - lease (as in read.lua), so it
-- is recoverable one lease later if its taker dies before `claim.lua`.
-- Held entries nobody takes are recovered by `recover.lua` after H, like any
-- entry, and held again if their scope still has no room.
--
-- With several keys it spans slots: standalone Redis only; cluster mode
-- runs it once per partition (one key). stream.lua is in front of it.
--
-- KEYS[1..n]: work streams {prefix}:{pNN}:work, in the order to serve them
-- ARGV[1]: consumer group
-- ARGV[2]: consumer (the taking worker)
-- ARGV[3]: N, the most entries to take
-- ARGV[4]: idle time to set on taken entries, ms (H - lease)
-- ARGV[5]: per, the most entries to take from one held consumer
-- ARGV[6]: rotation, where to start in each stream's list of held consumers
-- ARGV[7]: stale, ms: a worker's consumer with nothing pending and idle for
--          longer is deleted (held_consumers in stream.lua; H, the recovery
--          horizon, so no lease can still be running)
-- ARGV[8..]: held consumers to skip (scopes without room on this worker)
-- Returns: a flat array {key index, entry id, task id, ...} as recover.lua
--          (task id "" when the entry has no `task` field).

local left = tonumber(ARGV[3])
local per = tonumber(ARGV[5])
local rotation = tonumber(ARGV[6])
local skip = {}
local stale = tonumber(ARGV[7])
for i = 8, #ARGV do
  skip[ARGV[i]] = true
end
local out = {}
for i = 1, #KEYS do
  if left <= 0 then
    break
  end
  local held = {}
  for _, c in ipairs(held_consumers(KEYS[i], ARGV[1], stale)) do
    local name, pending = c[1], c[2]
    if pending == 0 then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[i], ARGV[1], name)
    elseif not skip[name] then
      held[#held + 1] = name
    end
  end
  for k = 0, #held - 1 do
    if left <= 0 then
      break
    end
    local name = held[(rotation + k) % #held + 1]
    local pending = redis.call('XPENDING', KEYS[i], ARGV[1], '-', '+', math.min(left, per), name)
    for _, p in ipairs(pending) do
      local id = p[1]
      redis.call('XCLAIM', KEYS[i], ARGV[1], ARGV[2], 0, id, 'IDLE', ARGV[4], 'JUSTID')
      local entry = redis.call('XRANGE', KEYS[i], id, id)[1]
      local task = entry and entry_task(entry[2]) or ''
      out[#out + 1] = i
      out[#out + 1] = id
      out[#out + 1] = task
      left = left - 1
    end
  end
end
return out
