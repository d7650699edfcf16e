-- dead_letters.lua: one partition's part of a dead-letter listing: the cursors
-- (index members) of the next letters, not the letters themselves (a listing
-- merges every partition's, then reads only the letters of its page).
--
-- KEYS[1]: an index of the partition: a tenant's or a scope's (see conclude_dead.lua)
-- ARGV[1]: where to start: "-" (the first) or "(<cursor>" (after it)
-- ARGV[2]: at most this many members
-- ARGV[3]: the partition's letter key prefix {prefix}:{pNN}:dead:
-- Returns: up to ARGV[2] members whose letter exists, oldest death first. A
--          member whose letter is gone (expired, discarded) is dropped from
--          the index on the way (at most ten rounds, so one call stays bounded).

local want = tonumber(ARGV[2])
local from = ARGV[1]
local out = {}
for _ = 1, 10 do
  if #out >= want then
    break
  end
  local members = redis.call('ZRANGE', KEYS[1], from, '+', 'BYLEX', 'LIMIT', 0, want - #out)
  if #members == 0 then
    break
  end
  for _, member in ipairs(members) do
    local id = string.match(member, '^%d+%.(.+)$')
    if id and redis.call('EXISTS', ARGV[3] .. id) == 1 then
      out[#out + 1] = member
    else
      redis.call('ZREM', KEYS[1], member)
    end
  end
  from = '(' .. members[#members]
end
return out
