-- session_admit.lua: count a legacy session that starts holding state in the
-- store-wide set, within max (see write_session.lua, which calls for it).
--
-- KEYS[1]: every session holding state  {prefix}:sessions (zset: member -> expiry ms)
-- ARGV[1]: the session's member (<scope tag>:<hex id>)
-- ARGV[2]: now, Unix ms
-- ARGV[3]: TTL in milliseconds
-- ARGV[4]: most sessions (0: no limit)
-- Returns: 1 admitted (or counted already), 0 refused (the store is full).

local now, ttl, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 1
end
if max > 0 and redis.call('ZCARD', KEYS[1]) >= max then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
