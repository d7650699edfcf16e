-- dead_list.lua: one partition's part of a dead-letter listing: the cursors
-- (index members) of the next letters, not the letters themselves (a listing
-- merges every partition's, then reads only the letters of its page).
--
-- KEYS[1]: an index of the partition: a tenant's or a scope's (see bury.lua)
-- ARGV[1]: where to start: "-" (the first) or "(<cursor>" (after it)
-- ARGV[2]: at most this many members
-- ARGV[3]: the partition's letter key prefix {prefix}:{pNN}:dead:
-- Returns: up to ARGV[2] members whose letter exists, oldest death first. A
--          member whose letter is gone (expired, discarded) is dropped from
--          the index on the way (at most ten rounds, so one call stays bounded).

-- index.lua is in front of it.

local out = {}
index_page(KEYS[1], ARGV[1], '+', tonumber(ARGV[2]), false, ARGV[3], out)
return out
