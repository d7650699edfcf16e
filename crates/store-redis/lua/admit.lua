-- admit.lua: admit a new task under its scope's active-task limit.
-- The scope set lives in its own slot (not the task's), so admission and
-- creation are two steps: see `limits.rs` for the races and their repair.
--
-- KEYS[1]: scope set  {prefix}:{s.<tenant>.<subject>}:active
-- ARGV[1]: limit
-- ARGV[2]: task id
-- ARGV[3]: admission time, Unix ms (the member's score)
-- ARGV[4]: the task's expiry, Unix ms, or "" when it never expires
-- Returns: 1 admitted (member added); 0 at the limit (nothing changed).
--
-- The set expires with the last of its members' tasks: a new set takes the
-- task's expiry, a live one is only ever extended (GT; a set without expiry
-- counts as never expiring), and a task that never expires makes it persist.

local before = redis.call('ZCARD', KEYS[1])
if before >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
if ARGV[4] == '' then
  redis.call('PERSIST', KEYS[1])
elseif before == 0 then
  redis.call('PEXPIREAT', KEYS[1], ARGV[4])
else
  redis.call('PEXPIREAT', KEYS[1], ARGV[4], 'GT')
end
return 1
