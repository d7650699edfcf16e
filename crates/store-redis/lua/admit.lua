-- admit.lua: admit a new task under its scope's active-task limit.
-- The scope set lives in its own slot (not the task's), so admission and
-- creation are two steps: see `limits.rs` for the races and their repair.
--
-- KEYS[1]: scope set  {prefix}:{s.<tenant>.<subject>}:active
-- ARGV[1]: limit
-- ARGV[2]: task id
-- ARGV[3]: admission time, Unix ms (the member's score)
-- Returns: 1 admitted (member added); 0 at the limit (nothing changed).

if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
return 1
