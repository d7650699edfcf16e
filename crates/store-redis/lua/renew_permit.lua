-- renew_permit.lua: extend a holder's permit by its lease, renewed with
-- its task's (permit.lua in front: the keys, purge, settle). Only the
-- fence that holds it renews it: a stale claim gets 0.
--
-- KEYS[1..5]: holders, fences, line, seen, index (see permit.lua)
-- ARGV[1]: holder id
-- ARGV[2]: its fence
-- ARGV[3]: the lease, ms
-- ARGV[4]: how long a waiter keeps its place unseen, ms
-- ARGV[5]: the semaphore's name in the index
-- Returns: 1 renewed; 0 it holds no permit (lapsed, or a newer fence holds it).

local now = permit_now()
purge(now, nil)
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[3]), ARGV[1])
settle(now, tonumber(ARGV[4]), ARGV[5])
return 1
