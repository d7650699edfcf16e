-- quota.lua: reserve a new task's bytes under its scope's byte quota.
-- Like admit.lua, the scope's keys live in their own slot (not the task's),
-- so the reservation is made first, atomically, then the task is created;
-- when the create definitely did not happen the reservation is taken back
-- (see `quota.rs`). A reservation lasts as long as its task: until its expiry.
--
-- KEYS[1]: scope reservations  {prefix}:{s.<tenant>.<subject>}:bytes
--          (sorted set: member "<task id>:<bytes>", score = the task's expiry, Unix ms)
-- KEYS[2]: scope total         {prefix}:{s.<tenant>.<subject>}:bytes_total
--          (string: the sum of the members' bytes)
-- ARGV[1]: quota, bytes
-- ARGV[2]: task id
-- ARGV[3]: the task's bytes
-- ARGV[4]: the task's expiry, Unix ms (far in the future when it never expires)
-- ARGV[5]: now, Unix ms
-- Returns: the scope's reserved bytes with this task's (>= 1: a task is never
--          0 bytes) when reserved; 0 over the quota (nothing reserved; expired
--          reservations, at most 1000 per call, are dropped either way).

local total = tonumber(redis.call('GET', KEYS[2]) or '0')
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[5], 'LIMIT', 0, 1000)
if #expired > 0 then
  for _, member in ipairs(expired) do
    total = total - (tonumber(string.match(member, ':(%d+)$')) or 0)
  end
  redis.call('ZREM', KEYS[1], unpack(expired))
  if total < 0 then
    total = 0
  end
  redis.call('SET', KEYS[2], total)
end
if total + tonumber(ARGV[3]) > tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2] .. ':' .. ARGV[3])
return redis.call('INCRBY', KEYS[2], ARGV[3])
