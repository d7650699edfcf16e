-- replay.lua: on a cluster, a keyed create's first step: has the owner used
-- this idempotency key before? (Standalone Redis asks inside
-- create_scoped.lua.) Asked before the scope's limits, so a retry of a create
-- that landed is answered even when the scope is now at its limit; create.lua
-- asks again, atomically with the create, for a retry racing the first try.
--
-- KEYS[1]: the record  {prefix}:{pNN}:idem:<digest> (see idempotency.lua)
-- ARGV[1]: the request's fingerprint
-- Returns: nil for a new key; {'replay', doc} when the key names a live
--          task made by the same request; -3 when by another request.

local found = idem_replay(KEYS[1], ARGV[1])
if found == nil then
  return false
end
return found
