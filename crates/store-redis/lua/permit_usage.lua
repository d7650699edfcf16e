-- permit_usage.lua: a limit's semaphores in use lately, for the admin view:
-- each key's live holders and its line. Reads the keys its index names,
-- all under the limit's hash tag (one slot).
--
-- KEYS[1]: the limit's index {prefix}:{c.<hex limit>}:keys (zset, hex key -> expiry)
-- ARGV[1]: the prefix of its semaphores' keys, {prefix}:{c.<hex limit>}:k.
-- ARGV[2]: most keys to answer
-- Returns: {hex key, permits held, waiters, ...}, flat.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, hex in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf', 'LIMIT', 0, tonumber(ARGV[2]))) do
  local base = ARGV[1] .. hex
  out[#out + 1] = hex
  out[#out + 1] = redis.call('ZCOUNT', base .. ':holders', '(' .. now, '+inf')
  out[#out + 1] = redis.call('ZCARD', base .. ':line')
end
return out
