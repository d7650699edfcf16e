-- release_permit.lua: give up a holder's permit, or its place in the line
-- (permit.lua in front: the keys, purge, settle), and answer the first
-- waiters, as many as permits are free, for the caller to wake. A stale
-- fence (a newer one holds the permit) gives up nothing.
--
-- KEYS[1..5]: holders, fences, line, seen, index (see permit.lua)
-- ARGV[1]: holder id
-- ARGV[2]: its fence
-- ARGV[3]: permits of the limit
-- ARGV[4]: how long a waiter keeps its place unseen, ms
-- ARGV[5]: the semaphore's name in the index
-- Returns: {released (1 or 0), {waiter ids to wake}}.

local now = permit_now()
local id = ARGV[1]
local ttl = tonumber(ARGV[4])
purge(now, ttl)
local held = redis.call('HGET', KEYS[2], id)
local released = 0
if held then
  -- (A holder is never in the line.)
  if held == ARGV[2] then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    released = 1
  end
elseif redis.call('ZSCORE', KEYS[3], id) then
  leave_line(id)
  released = 1
end
local free = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[1])
local wake = {}
if free > 0 then
  wake = redis.call('ZRANGE', KEYS[3], 0, free - 1)
end
settle(now, ttl, ARGV[5])
return {released, wake}
