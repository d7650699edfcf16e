-- ack.lua: remove a work entry for good (its task is terminal, gone, or
-- unreadable): acknowledge it and delete it from the stream together.
--
-- KEYS[1]: work stream  {prefix}:{pNN}:work
-- ARGV[1]: consumer group
-- ARGV[2]: work entry id
-- Returns: the number of entries deleted (0 or 1).

redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
