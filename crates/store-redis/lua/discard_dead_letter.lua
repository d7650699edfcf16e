-- discard_dead_letter.lua: remove a dead letter and its index members.
--
-- KEYS[1]: the letter {prefix}:{pNN}:dead:<id> (see conclude_dead.lua)
-- KEYS[2]: its tenant index, KEYS[3]: its scope index
-- ARGV[1]: the hex tenant asking (another tenant's letter is left alone)
-- ARGV[2]: the letter's index member (cursor)
-- Returns: 1 removed; 0 no letter of that tenant.

local v = redis.call('GET', KEYS[1])
if not v or string.match(v, '^(%x*) ') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
return 1
