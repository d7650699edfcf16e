-- acquire_permit.lua: take a permit of a semaphore, or take (or keep) a
-- place in its line (permit.lua in front: the keys, purge, settle). A
-- holder already holding it under an older or equal fence takes it over (its
-- task was claimed again); a newer fence holding it refuses this one. A
-- permit goes only to one of the first `free` waiters by order, then id
-- (with nobody waiting and a permit free, at once, without a place in line;
-- a holder is never in the line).
--
-- KEYS[1..5]: holders, fences, line, seen, index (see permit.lua)
-- ARGV[1]: permits of the limit
-- ARGV[2]: holder id (a task id)
-- ARGV[3]: its fence (the claim's attempt)
-- ARGV[4]: its order (its task's creation time, Unix ms)
-- ARGV[5]: the lease, ms
-- ARGV[6]: how long a waiter keeps its place unseen, ms
-- ARGV[7]: the semaphore's name in the index (hex of its key)
-- Returns: {1, 0, 0} granted; {0, in_use, ahead} waiting; {-1, 0, 0} fenced.

local now = permit_now()
local id, fence = ARGV[2], ARGV[3]
local ttl = tonumber(ARGV[6])
purge(now, ttl)
local held = redis.call('HGET', KEYS[2], id)
if held then
  if tonumber(held) > tonumber(fence) then
    return {-1, 0, 0}
  end
elseif redis.call('ZCARD', KEYS[3]) == 0 and redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  -- Nobody waits and a permit is free: granted without a place in line.
else
  local in_use = redis.call('ZCARD', KEYS[1])
  redis.call('ZADD', KEYS[3], ARGV[4], id)
  redis.call('ZADD', KEYS[4], now, id)
  local ahead = redis.call('ZRANK', KEYS[3], id)
  if ahead >= tonumber(ARGV[1]) - in_use then
    settle(now, ttl, ARGV[7])
    return {0, in_use, ahead}
  end
  leave_line(id)
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[5]), id)
redis.call('HSET', KEYS[2], id, fence)
settle(now, ttl, ARGV[7])
return {1, 0, 0}
