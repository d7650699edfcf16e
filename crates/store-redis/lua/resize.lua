-- resize.lua: count a task at its new size under its scope's byte quota, on
-- a cluster, where the scope's keys and the task's live in different slots
-- (standalone Redis does this inside transition.lua). A client write that
-- grows a live task runs this first, refusing growth past the quota, and
-- takes the growth back if its compare-and-set then loses; a write that may
-- not be refused (a worker's, a cancel) runs it after landing, with what
-- transition.lua found counted before (the task's `q`). A create that did
-- not happen takes its reservation back with it. See `records/quota.rs`.
--
-- KEYS[1]: the scope's buckets (as quota.lua)
-- ARGV[1]: the task's bucket (its `q`'s)
-- ARGV[2]: the bytes to add (negative to take back)
-- ARGV[3]: the quota, bytes, to refuse growth past it; "" never refuses
-- ARGV[4]: now, Unix ms
-- Returns: 0 when counted; -1 when the bucket is gone (its end passed:
--          nothing counted); -2 when the growth is refused (nothing changed).

local quota = nil
if ARGV[3] ~= '' then
  quota = tonumber(ARGV[3])
end
local delta = tonumber(ARGV[2])
if delta > 0 and quota and not quota_fit(KEYS[1], delta, quota, ARGV[4]) then
  return -2
end
if quota_count(KEYS[1], ARGV[1], delta) then
  return 0
end
return -1
