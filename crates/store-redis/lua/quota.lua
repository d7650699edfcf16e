-- quota.lua: reserve a new task's bytes under its scope's byte quota.
-- Like admit.lua, the scope's keys live in their own slot (not the task's),
-- so the reservation is made first, atomically, then the task is created
-- (create.lua, given the same `q` to keep in the task's hash); when the
-- create definitely did not happen the reservation is taken back (resize.lua
-- with the negative size; see `records/quota.rs`). A reservation lasts until
-- its bucket's end, at or a little after its task's expiry, resized as the
-- task grows. The layout of the keys is bytes.lua's, which runs in front of this.
--
-- KEYS[1]: scope buckets {prefix}:{s.<tenant>.<subject>}:bytes_q
-- ARGV[1]: quota, bytes
-- ARGV[2]: the task's `q`: "<its bytes>:<its bucket>" (`records/quota.rs`)
-- ARGV[3]: now, Unix ms
-- Returns: the scope's reserved bytes with this task's (>= 1: a task is never
--          0 bytes; buckets whose end passed less than one bucket width ago
--          may still be counted) when reserved; 0 over the quota (nothing
--          reserved; lapsed buckets were dropped first).

local bytes, bucket = string.match(ARGV[2], '^(%d+):(%S+)$')
return quota_reserve(KEYS[1], tonumber(bytes), bucket, group_number(ARGV[1]), ARGV[3])
