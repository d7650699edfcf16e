-- admit.lua: admit a new task under its scope's active-task limit, in O(1)
-- (amortised): the set is counted, and when it is full its expired members
-- are dropped by score and it is counted again.
-- The scope set lives in its own slot (not the task's), so admission and
-- creation are two steps: see `records/limits.rs` for the races.
--
-- KEYS[1]: scope set  {prefix}:{s.<tenant>.<subject>}:active
--          (sorted set: member = task id, score = the task's expiry, Unix ms,
--          or +inf when it never expires; and the pad, below)
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
-- The pad: every admission also adds the member ACTIVE_PAD (group.lua),
-- scored +inf, longer than `zset-max-listpack-value` (64 B by default), so
-- Redis keeps the set as a skiplist: adding and removing a task is then
-- O(log n), where a listpack (a set of up to 128 members) is scanned
-- whole, twice for each ZADD (is the member there, then where it goes):
-- 17,000 to 57,000 instructions a task at 20 to 120 members, about
-- 10,000 padded (docs/capacity.md), for about 100 B more a member. The pad is
-- never a task: it is not counted (ZCARD less one once it is there, which
-- each ZADD's reply says), never expires (+inf: no pruning by score drops
-- it) and leaves with the set's last task (group.lua's group_zrem). A pod
-- of the previous release counts it as a task: it admits one task fewer
-- into a set with the pad (docs/redis.md, "Rolling upgrades").
--
-- group.lua: the calls of a batch count the set once and extend its expiry
-- once a tenth of a second (hence the rounding): what this script counted and
-- set is known to its later calls ('card': ZCARD, the pad included when it
-- is there; 'pad': 1 when the pad is known to be there; 'lasts': the set
-- lives at least until then, or math.huge when it never expires).

local limit = group_number(ARGV[1])
local card = known(KEYS[1], 'card') or redis.call('ZCARD', KEYS[1])
local pad = known(KEYS[1], 'pad') or 0
if card - pad >= limit then
  -- Expired members only make the count too high, so only a full set needs
  -- them dropped (one command less on every other admission).
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
  card = know(KEYS[1], 'card', redis.call('ZCARD', KEYS[1]))
  if pad == 0 and card >= limit and redis.call('ZSCORE', KEYS[1], ACTIVE_PAD) then
    pad = know(KEYS[1], 'pad', 1)
  end
  if card - pad >= limit then
    return 0
  end
end
local lasts = known(KEYS[1], 'lasts')
if card == 0 then
  lasts = nil -- a new set: no expiry yet
end
-- 2 when the pad was not there yet (it is now), 1 when it was.
local added = redis.call('ZADD', KEYS[1], ARGV[4] == '' and '+inf' or ARGV[4], ARGV[2], '+inf', ACTIVE_PAD)
know(KEYS[1], 'card', card + added)
know(KEYS[1], 'pad', 1)
if ARGV[4] == '' then
  if lasts ~= math.huge then
    redis.call('PERSIST', KEYS[1])
    know(KEYS[1], 'lasts', math.huge)
  end
else
  local at = math.ceil(group_number(ARGV[4]) / 100) * 100
  if card == 0 then
    redis.call('PEXPIREAT', KEYS[1], at)
    know(KEYS[1], 'lasts', at)
  elseif not lasts or lasts < at then
    -- GT: a live set's expiry only ever moves later.
    redis.call('PEXPIREAT', KEYS[1], at, 'GT')
    know(KEYS[1], 'lasts', math.max(lasts or at, at))
  end
end
return card + added - 1
