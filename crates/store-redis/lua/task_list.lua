-- task_list.lua: one partition's part of an admin task listing: the cursors
-- (index members) of the next tasks, newest first, not the tasks themselves
-- (a listing merges every partition's, then reads only its page's tasks).
--
-- KEYS[1]: the partition's tenants {prefix}:{pNN}:ixt (see create.lua)
-- ARGV[1]: the partition's task index prefix {prefix}:{pNN}:ix:
-- ARGV[2]: one hex tenant, or "" for every tenant KEYS[1] names
-- ARGV[3]: the newest bound, ZRANGE BYLEX style: "+" or "(<cursor>"
-- ARGV[4]: the oldest bound: "-" or "[<time key>" (created at or after)
-- ARGV[5]: at most this many members
-- ARGV[6]: the partition's task key prefix {prefix}:{pNN}:task:
-- ARGV[7]: now, Unix ms (indexes expired by then are not read)
-- Returns: up to ARGV[5] members whose task exists, newest first. A member
--          whose task is gone (expired) is dropped from its index on the way
--          (at most ten rounds per index, so one call stays bounded).
--
-- The index keys are built here from ARGV[1], not passed in KEYS: they are
-- only known from KEYS[1], and share its slot (the partition's hash tag).
-- index.lua is in front of it.

local want = tonumber(ARGV[5])
local tenants
if ARGV[2] ~= '' then
  tenants = { ARGV[2] }
else
  tenants = redis.call('ZRANGE', KEYS[1], '(' .. ARGV[7], '+inf', 'BYSCORE')
end

local out = {}
for _, tenant in ipairs(tenants) do
  index_page(ARGV[1] .. tenant, ARGV[3], ARGV[4], want, true, ARGV[6], out)
end
if #tenants > 1 then
  table.sort(out, function(a, b) return a > b end)
  while #out > want do
    table.remove(out)
  end
end
return out
