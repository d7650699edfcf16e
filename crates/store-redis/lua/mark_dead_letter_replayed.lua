-- mark_dead_letter_replayed.lua: mark a dead letter replayed, once.
--
-- KEYS[1]: the letter {prefix}:{pNN}:dead:<id> (see conclude_dead.lua)
-- ARGV[1]: the hex tenant asking (another tenant's letter is none)
-- ARGV[2]: the id of the task the replay made
-- Returns: the replay's task id now stored (ARGV[2], or an earlier
--          replay's); nil when there is no letter of that tenant.

local v = redis.call('GET', KEYS[1])
if not v then
  return false
end
local tenant, mark, at = string.match(v, '^(%x*) (%S+)\n()')
if tenant ~= ARGV[1] then
  return false
end
if mark ~= '-' then
  return mark
end
redis.call('SET', KEYS[1], tenant .. ' ' .. ARGV[2] .. '\n' .. string.sub(v, at), 'KEEPTTL')
return ARGV[2]
