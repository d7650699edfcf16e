-- resize.lua: count a task at its new size under its scope's byte quota, on
-- a cluster, where the scope's keys and the task's live in different slots
-- (standalone Redis does this inside transition.lua). A client write that
-- grows a live task runs this first, refusing growth past the quota, and
-- takes the growth back if its compare-and-set then loses; a write that may
-- not be refused (a worker's, a cancel) runs it after landing, with what
-- transition.lua found counted before. A create that did not happen takes
-- its reservation back with it. See `records/quota.rs`.
--
-- KEYS[1..4]: as quota.lua (the scope's buckets, legacy reservations,
--             sizes and total)
-- ARGV[1]: task id
-- ARGV[2]: the task's bytes now
-- ARGV[3]: the quota, bytes, to refuse growth past it; "" never refuses
-- ARGV[4]: now, Unix ms
-- ARGV[5]: legacy: when the write that ends the task landed, the
--          reservation's score (the task's expiry, `records/quota.rs`
--          reservation_expiry), at which it is settled at this size (see
--          bytes_resize); else ""
-- ARGV[6]: the task's bucket when it was reserved under the buckets (its
--          `q`), "" for a legacy reservation
-- ARGV[7] (with ARGV[6]): the bytes to add (negative to take back); ARGV[2]
--          is then unused
-- Returns: the size counted before (>= 0; 0 with a bucket); -1 when the task
--          has no reservation (nothing changed: a legacy one settled or
--          expired, or a lapsed bucket); -2 when the growth is refused
--          (nothing changed).

local quota = nil
if ARGV[3] ~= '' then
  quota = tonumber(ARGV[3])
end
if ARGV[6] ~= '' then
  local delta = tonumber(ARGV[7])
  if delta > 0 and quota and not quota_fit(KEYS, delta, quota, ARGV[4]) then
    return -2
  end
  if quota_count(KEYS, ARGV[6], delta) then
    return 0
  end
  return -1
end
local settle = nil
if ARGV[5] ~= '' then
  settle = ARGV[5]
end
local before = bytes_resize(KEYS, ARGV[1], tonumber(ARGV[2]), quota, ARGV[4], settle)
if before == nil then
  return -1
elseif before == false then
  return -2
end
return before
