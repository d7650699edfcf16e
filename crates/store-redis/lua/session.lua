-- session.lua: set or remove one field of a legacy session's state hash and
-- let the whole hash expire TTL ms from now, together.
--
-- KEYS[1]: session hash  {prefix}:session:<hex id>
-- ARGV[1]: field
-- ARGV[2]: "1" to set, "0" to remove the field
-- ARGV[3]: value (ignored when removing)
-- ARGV[4]: TTL in milliseconds
-- Returns: 1.

if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
