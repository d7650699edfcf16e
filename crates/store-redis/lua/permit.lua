-- permit.lua: what the permit scripts share, put in front of each
-- (acquire_permit.lua, renew_permit.lua, release_permit.lua; the rule is
-- crates/store/src/permits.rs's `Semaphore`): the server's clock, the purge
-- of lapsed holders and of waiters unseen past their ttl, and the keys'
-- expiry. One semaphore (a limit's key) is four keys and its limit's index,
-- all under the limit's hash tag {c.<hex limit>}, so one slot:
--   KEYS[1] holders: zset, holder id -> its lease's end (Unix ms)
--   KEYS[2] fences:  hash, holder id -> its fence (the claim's attempt)
--   KEYS[3] line:    zset, waiter id -> its order (its task's creation, Unix ms)
--   KEYS[4] seen:    zset, waiter id -> when it last asked (Unix ms)
--   KEYS[5] index:   zset of the limit, hex key name -> when its semaphore's keys expire

local function permit_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function leave_line(id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
end

-- Drop the holders whose lease ended and (ttl given) the waiters unseen for ttl ms.
local function purge(now, ttl)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
  end
  if ttl then
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now - ttl)) do
      leave_line(id)
    end
  end
end

-- Every key expires a second after the last lease or waiter in it would
-- lapse, so no key outlives its use; the index keeps the semaphore's name
-- until then (for the admin view), and expires with the last one.
local function settle(now, ttl, name)
  local at = now
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then at = math.max(at, tonumber(last[2])) end
  last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  if last[2] then at = math.max(at, tonumber(last[2]) + ttl) end
  at = at + 1000
  for i = 1, 4 do
    redis.call('PEXPIREAT', KEYS[i], at)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  redis.call('ZADD', KEYS[5], at, name)
  last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[5], tonumber(last[2]))
end
