-- bytes.lua: a scope's byte quota (`records/quota.rs`). Not a script of its
-- own: `scripts.rs` puts it in front of quota.lua, resize.lua,
-- transition.lua and create_scoped.lua, so the layout is written once.
--
-- Every function takes `b`, the scope's four keys (its slot, not the
-- task's), as the table {buckets, reservations, sizes, total}:
--   {prefix}:{s.<tenant>.<subject>}:bytes_q      hash: the scope's counted
--       bytes by expiry bucket (field = the bucket's end, Unix ms, or "inf"
--       for tasks that never expire), and their sum in the field "total"
--   {prefix}:{s.<tenant>.<subject>}:bytes        } the layout before the
--   {prefix}:{s.<tenant>.<subject>}:bytes_sizes  } buckets ("legacy", below):
--   {prefix}:{s.<tenant>.<subject>}:bytes_total  } still counted
--
-- A task reserved under the buckets carries its counted size and its
-- bucket in its own hash, the field `q` = "<bytes>:<bucket>" (task.lua),
-- so a write that changes its size moves two numbers (HINCRBY the bucket
-- and the total) and finds what it counted before in the read it does
-- anyway. A task's bucket ends at or after its expiry, by at most a 64th
-- of its lifetime (65.5 s at most: `records/quota.rs` reservation_bucket),
-- so its bytes count that much longer than it lives, never less. A bucket
-- is dropped whole once its end has passed: when the quota would refuse,
-- and each time a new bucket is opened (at most once per bucket width of
-- a steady scope), then the key's expiry is moved to its latest bucket's
-- end, so a scope whose tasks have all expired leaves nothing behind.
--
-- Legacy: reservations written by pods of an earlier release (the three
-- `bytes` keys, one entry per task) are counted in every fit check until
-- they expire, and a task created under them is still resized and settled
-- there (it has no `q`); old pods, side by side with new ones during a
-- rolling upgrade, keep writing them and see only them.
--
-- The legacy keys:
--   bytes        sorted set: member = task id, score = the task's expiry, Unix ms
--   bytes_sizes  hash: task id -> its bytes now
--   bytes_total  string: the sum of the sizes
-- A task is counted from its creation until its expiry at the size its
-- record has now. The three keys expire a little after the last
-- reservation. A reservation whose task ended (`bytes_resize` settling
-- it) is the member "<task id>:<bytes>" with no size entry: it is counted
-- at that size until it expires and is never resized. The legacy
-- functions below take `l`, the table {reservations, sizes, total}.
--
-- In a batch (group.lua), the calls of one script share what they know of
-- a scope's keys: the legacy total is read once (known 'value'), and the
-- HINCRBYs of the buckets' hash are held and summed: one for the total and
-- one a bucket for all the batch's reservations (or all its counts), made
-- at the batch's end or before anything else reads or writes the hash
-- (quota_settle). A reservation is checked against the total as known
-- (known 'total': read once, then the held ones added), which is the total
-- its HINCRBY would have given alone.

-- The legacy total as kept (reservations expired but not swept included).
local function bytes_total(l)
  return known(l[3], 'value') or know(l[3], 'value', tonumber(redis.call('GET', l[3]) or '0'))
end

-- Scores at or past 2^52 ms are tasks that never expire (`records/quota.rs` NEVER).
local BYTES_NEVER = 4503599627370496

-- The size of reservation `member` (0 when unknown).
local function bytes_size_of(l, member)
  local size = redis.call('HGET', l[2], member)
  if size then
    return tonumber(size)
  end
  return tonumber(string.match(member, ':(%d+)$')) or 0
end

-- Drop reservations expired at `now` (at most 1000 a call); returns the
-- scope's total after.
local function bytes_sweep(l, now)
  local total = bytes_total(l)
  local expired = redis.call('ZRANGEBYSCORE', l[1], '-inf', now, 'LIMIT', 0, 1000)
  if #expired == 0 then
    return total
  end
  for _, member in ipairs(expired) do
    total = total - bytes_size_of(l, member)
  end
  redis.call('ZREM', l[1], unpack(expired))
  redis.call('HDEL', l[2], unpack(expired))
  if total < 0 then
    total = 0
  end
  redis.call('SET', l[3], total, 'KEEPTTL') -- a refusal after a sweep writes no expiry
  return know(l[3], 'value', total)
end

-- Make the three keys expire a little after the last reservation (a tenth
-- of its time left at `now`, a minute at most), or never when a task never
-- expires; delete them once nothing is reserved. The slack lets the next
-- reservations of a steady scope find the keys outliving them already
-- (`bytes_outlive`), sparing them these writes.
local function bytes_expire(l, now)
  local last = redis.call('ZRANGE', l[1], -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', l[1], l[2], l[3])
    know(l[3], 'value', 0)
    return
  end
  local at = tonumber(last[2])
  if at < BYTES_NEVER then
    at = at + math.max(0, math.min(60000, math.floor((at - tonumber(now)) / 10)))
  end
  for _, key in ipairs(l) do
    if at >= BYTES_NEVER then
      redis.call('PERSIST', key)
    elseif redis.call('EXISTS', key) == 1 then
      redis.call('PEXPIREAT', key, at)
    end
  end
end

-- Makes what a batch holds for a scope's buckets (defined below).
local quota_settle

-- The buckets' total as kept (held counts included).
local function quota_total(b)
  return known(b[1], 'total') or know(b[1], 'total', tonumber(redis.call('HGET', b[1], 'total') or '0'))
end

-- The buckets (below) of `b`'s hash whose end has passed at `now` are
-- dropped and the total lowered by their bytes; returns the total after.
local function quota_sweep(b, now)
  quota_settle(b)
  local all = redis.call('HGETALL', b[1])
  local total, lapsed, freed = 0, {}, 0
  now = tonumber(now)
  for i = 1, #all, 2 do
    local field = all[i]
    if field == 'total' then
      total = tonumber(all[i + 1])
    elseif field ~= 'inf' and tonumber(field) <= now then
      lapsed[#lapsed + 1] = field
      freed = freed + tonumber(all[i + 1])
    end
  end
  if #lapsed == 0 then
    return know(b[1], 'total', total)
  end
  redis.call('HDEL', b[1], unpack(lapsed))
  return know(b[1], 'total', redis.call('HINCRBY', b[1], 'total', -freed))
end

-- Whether `growth` more bytes fit under `quota` at `now`, counting the
-- buckets and the legacy reservations: against the totals as kept, and
-- only when they say no, once lapsed buckets and expired legacy
-- reservations are dropped.
local function quota_fit(b, growth, quota, now)
  quota_settle(b)
  local total = quota_total(b)
  local legacy = { b[2], b[3], b[4] }
  local old = bytes_total(legacy)
  if total + old + growth <= quota then
    return true
  end
  return quota_sweep(b, now) + bytes_sweep(legacy, now) + growth <= quota
end

-- What a batch holds for the buckets' hash b[1] (known 'held'), of one
-- kind (`reserve`: quota_reserve's, or counts: quota_count's): the sum for
-- the total, and each bucket's sum (with the `now` of its first call) in
-- the order first held. A new record when `reserve` differs from the held
-- one's kind (that one made first), or when outside a batch (nil).
local function quota_held(b, reserve)
  local h = group_held and known(b[1], 'held')
  if h and h.reserve == reserve then
    -- Held already (so its settling is registered): spares the name and
    -- the closure group_hold would be given, once a call.
    return h
  end
  if not group_hold('quota\0' .. b[1], function()
    quota_settle(b)
  end) then
    return nil
  end
  if h and h.reserve ~= reserve then
    quota_settle(b)
    h = nil
  end
  if not h then
    h = know(b[1], 'held', { reserve = reserve, total = 0, buckets = {}, order = {}, now = {} })
  end
  return h
end

-- `delta` more bytes held for `bucket` in `h` (quota_held), at `now`.
local function quota_hold(h, bucket, delta, now)
  local sum = h.buckets[bucket]
  if not sum then
    h.order[#h.order + 1] = bucket
    h.now[bucket] = now
  end
  h.buckets[bucket] = (sum or 0) + delta
  h.total = h.total + delta
end

-- Add `delta` bytes to bucket `bucket` and the total, unless the bucket is
-- gone (its end passed and it was dropped, or the key expired: a late
-- write of a task that lapsed counts nothing). Returns whether counted; in
-- a batch, true: it is held and counted at the batch's end (quota_settle),
-- unless the bucket is gone then.
local function quota_count(b, bucket, delta)
  if delta == 0 then
    return true
  end
  local h = quota_held(b, false)
  know(b[1], 'total', nil) -- not known until counted: its bucket may be gone
  if h then
    quota_hold(h, bucket, delta)
    return true
  end
  if redis.call('HINCRBY', b[1], bucket, delta) == delta then
    redis.call('HDEL', b[1], bucket)
    return false
  end
  redis.call('HINCRBY', b[1], 'total', delta)
  return true
end

-- A new bucket `bucket` was opened: drop the lapsed ones and make the key
-- last until its latest bucket's end (never, with a bucket "inf").
local function quota_opened(b, bucket, now)
  quota_sweep(b, now)
  local at = redis.call('PEXPIRETIME', b[1]) -- -1: none (new key, or an "inf" bucket)
  if bucket == 'inf' then
    redis.call('PERSIST', b[1])
  elseif at == -1 then
    if redis.call('HEXISTS', b[1], 'inf') == 0 then
      redis.call('PEXPIREAT', b[1], bucket)
    end
  elseif at < tonumber(bucket) then
    redis.call('PEXPIREAT', b[1], bucket)
  end
end

-- Make what a batch holds for b[1] (quota_held), as the calls would have
-- alone: reservations add to the total, then to each bucket, a bucket new
-- then being opened (quota_opened); counts add to each bucket, and to the
-- total what a bucket still there took (a bucket gone takes nothing).
quota_settle = function(b)
  local h = known(b[1], 'held')
  if not h then
    return
  end
  know(b[1], 'held', nil)
  know(b[1], 'total', nil)
  if h.reserve then
    redis.call('HINCRBY', b[1], 'total', h.total)
    for _, bucket in ipairs(h.order) do
      local sum = h.buckets[bucket]
      if redis.call('HINCRBY', b[1], bucket, sum) == sum then
        quota_opened(b, bucket, h.now[bucket])
      end
    end
    return
  end
  local counted = 0
  for _, bucket in ipairs(h.order) do
    local sum = h.buckets[bucket]
    if sum ~= 0 then
      if redis.call('HINCRBY', b[1], bucket, sum) == sum then
        redis.call('HDEL', b[1], bucket)
      else
        counted = counted + sum
      end
    end
  end
  if counted ~= 0 then
    redis.call('HINCRBY', b[1], 'total', counted)
  end
end

-- Reserve `bytes` for a new task in bucket `bucket` unless the scope's
-- total (its buckets' and its legacy reservations') would pass `quota`;
-- returns that total with them, or 0 when refused (nothing reserved).
-- Alone, three commands when it fits and the bucket is open: the total,
-- the legacy total, the bucket. In a batch, held (quota_held): the two
-- totals are read once a batch and the HINCRBYs made once at its end.
local function quota_reserve(b, bytes, bucket, quota, now)
  local h = quota_held(b, true)
  if h then
    local total, old = quota_total(b) + bytes, bytes_total({ b[2], b[3], b[4] })
    if total + old <= quota then
      quota_hold(h, bucket, bytes, now)
      know(b[1], 'total', total)
      return total + old
    end
    -- Over the quota as kept: what is held is made, and this one goes on
    -- as alone (sweeping, or refused).
    quota_settle(b)
  end
  know(b[1], 'total', nil)
  local total = redis.call('HINCRBY', b[1], 'total', bytes)
  local legacy = { b[2], b[3], b[4] }
  local old = bytes_total(legacy)
  if total + old > quota then
    total = quota_sweep(b, now)
    if total + old > quota then
      old = bytes_sweep(legacy, now)
    end
    if total + old > quota then
      know(b[1], 'total', nil)
      if redis.call('HINCRBY', b[1], 'total', -bytes) == 0 and redis.call('HLEN', b[1]) == 1 then
        redis.call('DEL', b[1]) -- nothing reserved: no key left without an expiry
      end
      return 0
    end
  end
  if redis.call('HINCRBY', b[1], bucket, bytes) == bytes then
    quota_opened(b, bucket, now)
  end
  return total + old
end

-- Legacy: count task `id` at `bytes` from now on. With `quota` (a number,
-- or nil), growth that would take the scope's total past it is refused.
-- With `settle` (the write that ends the task landed: its size never
-- changes again), the reservation's score (its expiry), the reservation
-- becomes the member "<id>:<bytes>" at that score and its size entry goes.
-- Returns the size counted before (nil when the task has no legacy
-- reservation, or one settled already: nothing changes), or false when
-- refused.
local function bytes_resize(b, id, bytes, quota, now, settle)
  local l = { b[2], b[3], b[4] }
  local before = redis.call('HGET', l[2], id)
  if not before then
    return nil
  end
  before = tonumber(before)
  local growth = bytes - before
  if growth > 0 and quota and not quota_fit(b, growth, quota, now) then
    return false
  end
  if settle then
    redis.call('HDEL', l[2], id)
    if redis.call('ZREM', l[1], id) == 1 then
      -- Its last member removed, the set was deleted with its expiry: the
      -- ZADD makes a new one, which must expire too.
      local emptied = redis.call('EXISTS', l[1]) == 0
      redis.call('ZADD', l[1], settle, id .. ':' .. bytes)
      if emptied then
        bytes_expire(l, now)
      end
    end
  elseif growth ~= 0 then
    redis.call('HSET', l[2], id, bytes)
  end
  if growth ~= 0 then
    know(l[3], 'value', redis.call('INCRBY', l[3], growth))
  end
  return before
end

-- Count a task reserved under the buckets, whose `q` field (task.lua) is
-- `counted` ("<bytes>:<bucket>"), at `bytes`: growth past `quota` (a number,
-- or nil) is refused. Returns its new `q`, or false when refused.
local function quota_resize(b, counted, bytes, quota, now)
  local before, bucket = string.match(counted, '^(%d+):(%S+)$')
  local growth = bytes - tonumber(before)
  if growth > 0 and quota and not quota_fit(b, growth, quota, now) then
    return false
  end
  quota_count(b, bucket, growth)
  return bytes .. ':' .. bucket
end
