-- bytes.lua: a scope's byte reservations (the byte quota, `records/quota.rs`). Not a
-- script of its own: `scripts.rs` puts it in front of quota.lua, resize.lua,
-- transition.lua and create_scoped.lua, so the layout is written once.
--
-- Three keys in the scope's slot, passed to every function as `b`, a table
-- {reservations, sizes, total}:
--   {prefix}:{s.<tenant>.<subject>}:bytes        sorted set: member = task id,
--                                                score = the task's expiry, Unix ms
--   {prefix}:{s.<tenant>.<subject>}:bytes_sizes  hash: task id -> its bytes now
--   {prefix}:{s.<tenant>.<subject>}:bytes_total  string: the sum of the sizes
-- A task is counted from its creation until its expiry at the size its
-- record has now (it grows with answers, status messages and results).
-- The three keys expire a little after the last reservation, so a scope
-- whose tasks have all expired leaves nothing behind.
--
-- A reservation whose task ended (`bytes_resize` settling it), or one
-- written before `bytes_sizes` existed, is the member "<task id>:<bytes>"
-- with no size entry: it is counted at that size until it expires and is
-- never resized.

-- Scores at or past 2^52 ms are tasks that never expire (`records/quota.rs` NEVER).
local BYTES_NEVER = 4503599627370496

-- The size of reservation `member` (0 when unknown).
local function bytes_size_of(b, member)
  local size = redis.call('HGET', b[2], member)
  if size then
    return tonumber(size)
  end
  return tonumber(string.match(member, ':(%d+)$')) or 0
end

-- Drop reservations expired at `now` (at most 1000 a call); returns the
-- scope's total after.
local function bytes_sweep(b, now)
  local total = tonumber(redis.call('GET', b[3]) or '0')
  local expired = redis.call('ZRANGEBYSCORE', b[1], '-inf', now, 'LIMIT', 0, 1000)
  if #expired == 0 then
    return total
  end
  for _, member in ipairs(expired) do
    total = total - bytes_size_of(b, member)
  end
  redis.call('ZREM', b[1], unpack(expired))
  redis.call('HDEL', b[2], unpack(expired))
  if total < 0 then
    total = 0
  end
  redis.call('SET', b[3], total, 'KEEPTTL') -- a refusal after a sweep writes no expiry
  return total
end

-- Make the three keys expire a little after the last reservation (a tenth
-- of its time left at `now`, a minute at most), or never when a task never
-- expires; delete them once nothing is reserved. The slack lets the next
-- reservations of a steady scope find the keys outliving them already
-- (`bytes_outlive`), sparing them these writes.
local function bytes_expire(b, now)
  local last = redis.call('ZRANGE', b[1], -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', b[1], b[2], b[3])
    return
  end
  local at = tonumber(last[2])
  if at < BYTES_NEVER then
    at = at + math.max(0, math.min(60000, math.floor((at - tonumber(now)) / 10)))
  end
  for _, key in ipairs(b) do
    if at >= BYTES_NEVER then
      redis.call('PERSIST', key)
    elseif redis.call('EXISTS', key) == 1 then
      redis.call('PEXPIREAT', key, at)
    end
  end
end

-- Whether each of the three keys exists and expires at or after `expiry`
-- (a reservation's score), so a reservation expiring then changes no expiry.
local function bytes_outlive(b, expiry)
  if expiry >= BYTES_NEVER then
    return false
  end
  for _, key in ipairs(b) do
    if redis.call('PEXPIRETIME', key) < expiry then -- -1 (none) and -2 (no key) too
      return false
    end
  end
  return true
end

-- The scope's total, counting the reservations that expired but were not
-- swept yet: at least the live ones' sum.
local function bytes_total(b)
  return tonumber(redis.call('GET', b[3]) or '0')
end

-- Whether `growth` more bytes fit under `quota` at `now`: against the
-- total as kept, and only when that says no, once expired reservations
-- are swept (an expired reservation never causes a refusal).
local function bytes_fit(b, growth, quota, now)
  return bytes_total(b) + growth <= quota or bytes_sweep(b, now) + growth <= quota
end

-- Reserve `bytes` for new task `id` expiring at `expiry` unless the total
-- would pass `quota`; returns the total with them, or 0 when refused.
-- Expired reservations are swept when the quota would refuse, and each
-- time the keys' expiry is moved on (`bytes_expire`, about every tenth of
-- a task's lifetime, a minute at most): a steady scope keeps them that
-- long past their expiry, counted in the total (the quota-use metric), and
-- two commands a create are spared.
local function bytes_reserve(b, id, bytes, expiry, quota, now)
  if not bytes_fit(b, bytes, quota, now) then
    return 0
  end
  redis.call('ZADD', b[1], expiry, id)
  redis.call('HSET', b[2], id, bytes)
  local total = redis.call('INCRBY', b[3], bytes)
  if not bytes_outlive(b, tonumber(expiry)) then
    total = bytes_sweep(b, now)
    bytes_expire(b, now)
  end
  return total
end

-- Count task `id` at `bytes` from now on. With `quota` (a number, or nil),
-- growth that would take the total past it is refused. With `settle` (the
-- write that ends the task landed: its size never changes again), the
-- reservation's score (its expiry, `records/quota.rs` reservation_expiry), the
-- reservation becomes the member "<id>:<bytes>" at that score, as those
-- older than `bytes_sizes` are, and its size entry goes: a finished task
-- then costs the quota one sorted-set entry, not that and a hash field
-- (about 70 bytes of Redis memory less until its expiry). Returns the size
-- counted before (nil when the task has no reservation, or one settled
-- already: nothing changes), or false when refused.
local function bytes_resize(b, id, bytes, quota, now, settle)
  local before = redis.call('HGET', b[2], id)
  if not before then
    return nil
  end
  before = tonumber(before)
  local growth = bytes - before
  if growth > 0 and quota and not bytes_fit(b, growth, quota, now) then
    return false
  end
  if settle then
    redis.call('HDEL', b[2], id)
    if redis.call('ZREM', b[1], id) == 1 then
      -- Its last member removed, the set was deleted with its expiry: the
      -- ZADD makes a new one, which must expire too.
      local emptied = redis.call('EXISTS', b[1]) == 0
      redis.call('ZADD', b[1], settle, id .. ':' .. bytes)
      if emptied then
        bytes_expire(b, now)
      end
    end
  elseif growth ~= 0 then
    redis.call('HSET', b[2], id, bytes)
  end
  if growth ~= 0 then
    redis.call('INCRBY', b[3], growth)
  end
  return before
end
