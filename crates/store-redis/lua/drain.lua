-- drain.lua: ask a live process to drain (its next heartbeat is told).
--
-- KEYS[1]: its node key {prefix}:{nodes}:node:<id>
-- KEYS[2]: every node {prefix}:{nodes}:all
-- KEYS[3]: the drains {prefix}:{nodes}:drain
-- ARGV[1]: the node id
-- ARGV[2]: now, Unix ms
-- Returns: its last heartbeat JSON, or nil when no live node has that id
--          (nothing written then).

local beat = redis.call('GET', KEYS[1])
local until_ms = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not beat or not until_ms or tonumber(until_ms) <= tonumber(ARGV[2]) then
  return false
end
redis.call('ZADD', KEYS[3], until_ms, ARGV[1])
-- The drains expire with the last node they name (heartbeat.lua moves it on).
if redis.call('PEXPIRETIME', KEYS[3]) < tonumber(until_ms) then
  redis.call('PEXPIREAT', KEYS[3], until_ms)
end
return beat
