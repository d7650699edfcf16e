-- conclude_dead.lua: transition.lua for the write that ends a poison task, and the
-- task's dead letter recorded in the same step (`presa_store::dead`): a
-- letter exists exactly when that write landed. `scripts.rs` puts
-- transition.lua's body in front of this one as the local function
-- `transition`, called with its own KEYS and ARGV, so its logic is written
-- once. Every key is in the task's partition slot (plus, standalone only,
-- the scope keys transition.lua takes).
--
-- KEYS[1]: the letter      {prefix}:{pNN}:dead:<id>
-- KEYS[2]: tenant index    {prefix}:{pNN}:dead_t:<hex tenant>
-- KEYS[3]: scope index     {prefix}:{pNN}:dead_s:<hex tenant>.<hex subject>
--          (sorted sets, every score 0, member = the letter's cursor
--          "<died at, 20 digits>.<id>": lexical order is time of death)
-- KEYS[4..]: transition.lua's KEYS
-- ARGV[1]: the letter as stored: "<hex tenant> -\n<letter JSON>" (the
--          "-" becomes the replay's task id, mark_dead_letter_replayed.lua)
-- ARGV[2]: its index member (cursor)
-- ARGV[3]: when it expires, Unix ms: its death plus the retention
-- ARGV[4]: "(<20 digits>": index members before it belong to letters dead
--          longer than the retention (expired), and are dropped
-- ARGV[5..]: transition.lua's ARGV (the write must end the task)
-- Returns: transition.lua's reply; the letter is recorded only when it
--          says written (1, or {1, q before}).
--
-- Each index expires with its last letter: a new index takes the letter's
-- expiry, a live one is only ever extended (GT).

local reply = transition({ unpack(KEYS, 4) }, { unpack(ARGV, 5) })
-- Written: 1, or {1, q before} on a cluster.
if reply ~= 1 and (type(reply) ~= 'table' or reply[1] ~= 1) then
  return reply
end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[3])
for i = 2, 3 do
  redis.call('ZREMRANGEBYLEX', KEYS[i], '-', ARGV[4])
  redis.call('ZADD', KEYS[i], 0, ARGV[2])
  if redis.call('PTTL', KEYS[i]) < 0 then
    redis.call('PEXPIREAT', KEYS[i], ARGV[3])
  else
    redis.call('PEXPIREAT', KEYS[i], ARGV[3], 'GT')
  end
end
return reply
