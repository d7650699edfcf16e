-- dead_list.lua: one partition's page of a dead-letter listing.
--
-- KEYS[1]: an index of the partition: a tenant's or a scope's (see bury.lua)
-- ARGV[1]: where the page starts: "-" (the first) or "(<cursor>" (after it)
-- ARGV[2]: at most this many letters
-- ARGV[3]: the partition's letter key prefix {prefix}:{pNN}:dead:
-- Returns: up to ARGV[2] letters as stored, oldest death first. A member
--          whose letter expired is dropped from the index on the way (at
--          most ten rounds of reads, so one call stays bounded).

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
    local letter = id and redis.call('GET', ARGV[3] .. id)
    if letter then
      out[#out + 1] = letter
    else
      redis.call('ZREM', KEYS[1], member)
    end
  end
  from = '(' .. members[#members]
end
return out
