-- promote.lua: queue the delayed work that is due: each due member of a
-- partition's delayed set (see defer.lua) leaves it and becomes a new entry
-- at the end of the partition's work stream, exactly as create.lua adds one,
-- so it is claimed, fenced, held for fair shares and recovered like any
-- other work. A member whose task has ended or gone meanwhile is queued all
-- the same: the claim drops it (claim.lua), as it drops any such entry.
--
-- With several partitions it spans slots: standalone Redis only; cluster
-- mode runs it once per partition.
--
-- KEYS[3i-2]: partition i's delayed set  {prefix}:{pNN}:delayed
-- KEYS[3i-1]: partition i's work stream  {prefix}:{pNN}:work
-- KEYS[3i]:   partition i's wake channel {prefix}:{pNN}:wake
-- ARGV[1]: now, Unix ms: members scored at or before it are due
-- ARGV[2]: the most members to queue per partition
-- ARGV[3]: "SPUBLISH" to wake waiting claimers (cluster mode), or ""
-- Returns: {queued, next due}: how many members were queued in all, and the
--          earliest score still waiting over these partitions (-1: none).

local queued = 0
local next_due = -1
for i = 1, #KEYS / 3 do
  local delayed, stream, wake = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local due = redis.call('ZRANGE', delayed, '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
  for _, id in ipairs(due) do
    redis.call('ZREM', delayed, id)
    redis.call('XADD', stream, '*', 'task', id)
  end
  queued = queued + #due
  if #due > 0 and ARGV[3] ~= '' then
    redis.call(ARGV[3], wake, '1')
  end
  local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if first[2] then
    local at = tonumber(first[2])
    if next_due < 0 or at < next_due then
      next_due = at
    end
  end
end
return {queued, next_due}
