-- admit.lua: admit a new task under its scope's active-task limit, in O(1)
-- (amortised): the set is counted, and when it is full its expired members
-- are dropped by score and it is counted again.
-- The scope set lives in its own slot (not the task's), so admission and
-- creation are two steps: see `records/limits.rs` for the races.
--
-- KEYS[1]: scope set  {prefix}:{s.<tenant>.<subject>}:active
--          (sorted set: member = task id, score = the task's expiry, Unix ms,
--          or +inf when it never expires)
-- ARGV[1]: limit
-- ARGV[2]: task id
-- ARGV[3]: now, Unix ms
-- ARGV[4]: the task's expiry, Unix ms, or "" when it never expires
-- Returns: the scope's active tasks with this one (>= 1) when admitted
--          (member added; expired members may be among them, until the set
--          fills up or expires); 0 at the limit (expired members dropped,
--          nothing added).
--
-- A task is expired once now >= its expiry, so members scored <= now go.
-- The set expires with the last of its members' tasks, at the tenth of a
-- second at or after its expiry: a new set takes that, a live one is only ever
-- extended (GT; a set without expiry counts as never expiring), and a task
-- that never expires makes it persist.
--
-- group.lua: the calls of a batch count the set once and extend its expiry
-- once a tenth of a second (hence the rounding): what this script counted and
-- set is known to its later calls ('card': the members; 'lasts': the set
-- lives at least until then, or math.huge when it never expires).

local limit = group_number(ARGV[1])
local before = known(KEYS[1], 'card') or redis.call('ZCARD', KEYS[1])
if before >= limit then
  -- Expired members only make the count too high, so only a full set needs
  -- them dropped (one command less on every other admission).
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
  before = know(KEYS[1], 'card', redis.call('ZCARD', KEYS[1]))
  if before >= limit then
    return 0
  end
end
local lasts = known(KEYS[1], 'lasts')
if before == 0 then
  lasts = nil -- a new set: no expiry yet
end
if ARGV[4] == '' then
  know(KEYS[1], 'card', before + redis.call('ZADD', KEYS[1], '+inf', ARGV[2]))
  if lasts ~= math.huge then
    redis.call('PERSIST', KEYS[1])
    know(KEYS[1], 'lasts', math.huge)
  end
else
  know(KEYS[1], 'card', before + redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2]))
  local at = math.ceil(tonumber(ARGV[4]) / 100) * 100
  if before == 0 then
    redis.call('PEXPIREAT', KEYS[1], at)
    know(KEYS[1], 'lasts', at)
  elseif not lasts or lasts < at then
    -- GT: a live set's expiry only ever moves later.
    redis.call('PEXPIREAT', KEYS[1], at, 'GT')
    know(KEYS[1], 'lasts', math.max(lasts or at, at))
  end
end
return before + 1
