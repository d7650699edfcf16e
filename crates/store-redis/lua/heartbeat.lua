-- heartbeat.lua: record a live process's heartbeat, forget the silent ones,
-- and tell the process whether it was asked to drain.
--
-- KEYS[1]: its node key {prefix}:{nodes}:node:<id> (string: the heartbeat JSON)
-- KEYS[2]: every node {prefix}:{nodes}:all (sorted set: id → until)
-- KEYS[3]: the drains {prefix}:{nodes}:drain (sorted set: id → until)
-- ARGV[1]: the node id
-- ARGV[2]: the heartbeat JSON
-- ARGV[3]: until when it holds, Unix ms
-- ARGV[4]: now, Unix ms
-- Returns: 1 when the node was asked to drain, else 0.
--
-- The two sets expire with the last heartbeat they hold (no score outlives
-- it), so a cluster whose processes all stopped leaves no registry key.

-- Make `key` live at least until `until_ms` (never shortened: another node's
-- heartbeat may hold it longer).
local function outlive(key, until_ms)
  if redis.call('PEXPIRETIME', key) < tonumber(until_ms) then -- -1: no expiry yet
    redis.call('PEXPIREAT', key, until_ms)
  end
end

redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
outlive(KEYS[2], ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[4])
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
  outlive(KEYS[3], ARGV[3])
  return 1
end
return 0
