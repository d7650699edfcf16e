-- idempotency.lua: a keyed create's record (`presa_store::idempotency`). Not
-- a script of its own: `scripts.rs` puts it in front of create.lua,
-- create_scoped.lua and replay.lua, so the layout is written once.
--
-- A record is a string key in its task's partition slot,
--   {prefix}:{pNN}:idem:<digest of the owner's scope and the client's key>
-- holding "<fingerprint of the request>\n<task key>" and expiring with the
-- task (the client's key itself is never stored).

-- What a keyed create finds: nothing (no fingerprint given, nil or "": an
-- unkeyed create; a new key; or one whose task is gone: its record is
-- dropped), {'replay', doc} when the key names a live task made by the
-- same request, or -3 when by another request.
local function idem_replay(key, fingerprint)
  if not fingerprint or fingerprint == '' then
    return nil
  end
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  local fp, task_key = string.match(v, '^(%x+)\n(.+)$')
  local doc = nil
  if task_key then
    local _, _, _, d = task_load(task_key)
    doc = d
  end
  if not doc then
    redis.call('DEL', key)
    return nil
  end
  if fp ~= fingerprint then
    return -3
  end
  return { 'replay', doc }
end

-- Record that `fingerprint`'s create made the task at `task_key`, for as
-- long as the task lives (`expiry`: Unix ms, or "" when it never expires).
local function idem_record(key, fingerprint, task_key, expiry)
  if expiry ~= '' then
    redis.call('SET', key, fingerprint .. '\n' .. task_key, 'PXAT', expiry)
  else
    redis.call('SET', key, fingerprint .. '\n' .. task_key)
  end
end
