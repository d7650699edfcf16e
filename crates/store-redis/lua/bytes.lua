-- bytes.lua: a scope's byte quota (`records/quota.rs`). Not a script of its
-- own: `scripts.rs` puts it in front of quota.lua, resize.lua,
-- transition.lua and create_scoped.lua, so the layout is written once.
--
-- Every function takes `b`, the scope's key (its slot, not the task's):
--   {prefix}:{s.<tenant>.<subject>}:bytes_q      hash: the scope's counted
--       bytes by expiry bucket (field = the bucket's end, Unix ms, or "inf"
--       for tasks that never expire), and their sum in the field "total"
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
-- The layout before the buckets (the scope's `bytes`, `bytes_sizes` and
-- `bytes_total` keys, one entry a task, written by the release before the
-- one that brought the buckets) is neither read nor written: a rolling
-- upgrade is from the previous release, whose pods never write it
-- (docs/redis.md, "Rolling upgrades").
--
-- In a batch (group.lua), the calls of one script share what they know of
-- a scope's key: the HINCRBYs of the buckets' hash are held and summed:
-- one for the total and one a bucket for all the batch's reservations (or
-- all its counts), made at the batch's end or before anything else reads
-- or writes the hash (quota_settle). A reservation is checked against the
-- total as known (known 'total': read once, then the held ones added),
-- which is the total its HINCRBY would have given alone.

-- Makes what a batch holds for a scope's buckets (defined below).
local quota_settle

-- The buckets' total as kept (held counts included).
local function quota_total(b)
  return known(b, 'total') or know(b, 'total', tonumber(redis.call('HGET', b, 'total') or '0'))
end

-- The buckets (below) of `b`'s hash whose end has passed at `now` are
-- dropped and the total lowered by their bytes; returns the total after.
local function quota_sweep(b, now)
  quota_settle(b)
  local all = redis.call('HGETALL', b)
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
    return know(b, 'total', total)
  end
  redis.call('HDEL', b, unpack(lapsed))
  return know(b, 'total', redis.call('HINCRBY', b, 'total', -freed))
end

-- Whether `growth` more bytes fit under `quota` at `now`: against the
-- total as kept, and only when it says no, once lapsed buckets are dropped.
local function quota_fit(b, growth, quota, now)
  quota_settle(b)
  if quota_total(b) + growth <= quota then
    return true
  end
  return quota_sweep(b, now) + growth <= quota
end

-- What a batch holds for the buckets' hash b (known 'held'), of one
-- kind (`reserve`: quota_reserve's, or counts: quota_count's): the sum for
-- the total, and each bucket's sum (with the `now` of its first call) in
-- the order first held. A new record when `reserve` differs from the held
-- one's kind (that one made first), or when outside a batch (nil).
local function quota_held(b, reserve)
  local h = group_held and known(b, 'held')
  if h and h.reserve == reserve then
    -- Held already (so its settling is registered): spares the name and
    -- the closure group_hold would be given, once a call.
    return h
  end
  if not group_hold('quota\0' .. b, function()
    quota_settle(b)
  end) then
    return nil
  end
  if h and h.reserve ~= reserve then
    quota_settle(b)
    h = nil
  end
  if not h then
    h = know(b, 'held', { reserve = reserve, total = 0, buckets = {}, order = {}, now = {} })
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
  know(b, 'total', nil) -- not known until counted: its bucket may be gone
  if h then
    quota_hold(h, bucket, delta)
    return true
  end
  if redis.call('HINCRBY', b, bucket, delta) == delta then
    redis.call('HDEL', b, bucket)
    return false
  end
  redis.call('HINCRBY', b, 'total', delta)
  return true
end

-- A new bucket `bucket` was opened: drop the lapsed ones and make the key
-- last until its latest bucket's end (never, with a bucket "inf").
local function quota_opened(b, bucket, now)
  quota_sweep(b, now)
  local at = redis.call('PEXPIRETIME', b) -- -1: none (new key, or an "inf" bucket)
  if bucket == 'inf' then
    redis.call('PERSIST', b)
  elseif at == -1 then
    if redis.call('HEXISTS', b, 'inf') == 0 then
      redis.call('PEXPIREAT', b, bucket)
    end
  elseif at < tonumber(bucket) then
    redis.call('PEXPIREAT', b, bucket)
  end
end

-- Make what a batch holds for b (quota_held), as the calls would have
-- alone: reservations add to the total, then to each bucket, a bucket new
-- then being opened (quota_opened); counts add to each bucket, and to the
-- total what a bucket still there took (a bucket gone takes nothing).
quota_settle = function(b)
  local h = known(b, 'held')
  if not h then
    return
  end
  know(b, 'held', nil)
  know(b, 'total', nil)
  if h.reserve then
    redis.call('HINCRBY', b, 'total', h.total)
    for _, bucket in ipairs(h.order) do
      local sum = h.buckets[bucket]
      if redis.call('HINCRBY', b, bucket, sum) == sum then
        quota_opened(b, bucket, h.now[bucket])
      end
    end
    return
  end
  local counted = 0
  for _, bucket in ipairs(h.order) do
    local sum = h.buckets[bucket]
    if sum ~= 0 then
      if redis.call('HINCRBY', b, bucket, sum) == sum then
        redis.call('HDEL', b, bucket)
      else
        counted = counted + sum
      end
    end
  end
  if counted ~= 0 then
    redis.call('HINCRBY', b, 'total', counted)
  end
end

-- Reserve `bytes` for a new task in bucket `bucket` unless the scope's
-- total would pass `quota`; returns that total with them, or 0 when
-- refused (nothing reserved). Alone, two commands when it fits and the
-- bucket is open: the total, the bucket. In a batch, held (quota_held):
-- the total is read once a batch and the HINCRBYs made once at its end.
local function quota_reserve(b, bytes, bucket, quota, now)
  local h = quota_held(b, true)
  if h then
    local total = quota_total(b) + bytes
    if total <= quota then
      quota_hold(h, bucket, bytes, now)
      return know(b, 'total', total)
    end
    -- Over the quota as kept: what is held is made, and this one goes on
    -- as alone (sweeping, or refused).
    quota_settle(b)
  end
  know(b, 'total', nil)
  local total = redis.call('HINCRBY', b, 'total', bytes)
  if total > quota then
    total = quota_sweep(b, now)
    if total > quota then
      know(b, 'total', nil)
      if redis.call('HINCRBY', b, 'total', -bytes) == 0 and redis.call('HLEN', b) == 1 then
        redis.call('DEL', b) -- nothing reserved: no key left without an expiry
      end
      return 0
    end
  end
  if redis.call('HINCRBY', b, bucket, bytes) == bytes then
    quota_opened(b, bucket, now)
  end
  return total
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
