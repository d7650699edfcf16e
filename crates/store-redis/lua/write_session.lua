-- write_session.lua: one write to a legacy session's state hash, counted and
-- capped, the hash expiring TTL ms from now. The first write of a session
-- (no hash yet) registers it in its scope's set of sessions holding state,
-- within max_per_scope; the store-wide count is kept by session_admit.lua,
-- which the caller runs first when this script answers 'admit'.
--
-- KEYS[1]: session hash      {prefix}:{s.<scope>}:session:<hex id>
-- KEYS[2]: scope's sessions  {prefix}:{s.<scope>}:sessions (zset: hex id -> expiry ms)
-- ARGV[1]: 'set', 'del' (remove the field) or 'end' (drop every field but this one, set to 1)
-- ARGV[2]: field
-- ARGV[3]: value (for 'set')
-- ARGV[4]: TTL in milliseconds
-- ARGV[5]: now, Unix ms
-- ARGV[6]: most fields (0: no limit)
-- ARGV[7]: most bytes, field names plus values (0: no limit)
-- ARGV[8]: most sessions holding state for the scope (0: no limit)
-- ARGV[9]: the session's member in KEYS[2] (its hex id)
-- ARGV[10]: '1' when the store-wide count admitted the session (or has no limit)
-- ARGV[11]: the prefix of the fields ARGV[6] counts ('' : every field)
-- Returns: 'ok', 'admit' (a new session: admit it store-wide, then call
-- again with ARGV[10] = '1'), or the name of the limit that refused the write.
-- The hash keeps its size in the field '#bytes' and how many counted fields
-- it has in '#n' (no session field starts with '#').

local hash, reg = KEYS[1], KEYS[2]
local op, field, value = ARGV[1], ARGV[2], ARGV[3]
local ttl, now = tonumber(ARGV[4]), tonumber(ARGV[5])
local max_fields, max_bytes, max_per_scope = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local member, admitted, prefix = ARGV[9], ARGV[10] == '1', ARGV[11]
local function counted(f)
  return string.sub(f, 1, #prefix) == prefix
end

local exists = redis.call('EXISTS', hash) == 1
if not exists then
  if op == 'del' then
    return 'ok'
  end
  redis.call('ZREMRANGEBYSCORE', reg, '-inf', now)
  if max_per_scope > 0 and not redis.call('ZSCORE', reg, member)
      and redis.call('ZCARD', reg) >= max_per_scope then
    return 'max_legacy_sessions_per_scope'
  end
  if not admitted then
    return 'admit'
  end
end

-- Every check first: a refused write changes nothing (a new session is not registered).
local bytes, n = 0, 0
if exists then
  bytes = tonumber(redis.call('HGET', hash, '#bytes') or '0')
  n = tonumber(redis.call('HGET', hash, '#n') or '0')
end
local old = false
local new = bytes
if op == 'set' then
  old = exists and redis.call('HGET', hash, field)
  new = bytes + #field + #value
  if old then
    new = new - #field - #old
  elseif counted(field) then
    if max_fields > 0 and n >= max_fields then
      return 'max_legacy_session_fields'
    end
    n = n + 1
  end
  if new > bytes and max_bytes > 0 and new > max_bytes then
    return 'max_legacy_session_bytes'
  end
end

if not exists then
  redis.call('ZADD', reg, now + ttl, member)
  if redis.call('PTTL', reg) < ttl then
    redis.call('PEXPIRE', reg, ttl)
  end
end
if op == 'set' then
  redis.call('HSET', hash, field, value, '#bytes', new, '#n', n)
elseif op == 'del' then
  old = redis.call('HGET', hash, field)
  if old then
    if counted(field) then
      n = n - 1
    end
    redis.call('HDEL', hash, field)
    redis.call('HSET', hash, '#bytes', bytes - #field - #old, '#n', n)
  end
else
  redis.call('DEL', hash)
  redis.call('HSET', hash, field, '1', '#bytes', #field + 1, '#n', counted(field) and 1 or 0)
end
redis.call('PEXPIRE', hash, ttl)
redis.call('ZADD', reg, 'XX', now + ttl, member)
return 'ok'
