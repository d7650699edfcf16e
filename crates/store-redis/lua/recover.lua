-- recover.lua: take over up to N work entries whose lease lapsed (idle for
-- at least the horizon H), partition after partition, in one round trip.
-- With several keys it spans slots: standalone Redis only; cluster mode
-- runs it once per partition (one key).
--
-- XAUTOCLAIM resets an entry's idle time to 0; it is set to H - lease in the
-- same step, so an entry whose recoverer dies before `claim.lua` is
-- recoverable again one lease later (as in read.lua).
--
-- stream.lua (in front of this script) parses the entries' fields.
--
-- KEYS[1..n]: work streams {prefix}:{pNN}:work, in the order to serve them
-- ARGV[1]: consumer group
-- ARGV[2]: consumer (the recovering worker)
-- ARGV[3]: H, the min idle time in ms (`max_lease`)
-- ARGV[4]: N, the most entries to take
-- ARGV[5]: idle time to set on taken entries, ms (H - lease)
-- Returns: a flat array {key index, entry id, task id, ...} (task id "" when
--          the entry has no `task` field).

local left = tonumber(ARGV[4])
local out = {}
for i = 1, #KEYS do
  -- XAUTOCLAIM looks at no more than COUNT * 10 pending entries per call:
  -- a long run of live ones at the head (parked tasks, held work) would hide
  -- lapsed entries behind it, so go on from its cursor, a few calls at most.
  local cursor, calls = '0-0', 0
  repeat
    if left <= 0 then
      break
    end
    local reply = redis.call('XAUTOCLAIM', KEYS[i], ARGV[1], ARGV[2], ARGV[3],
      cursor, 'COUNT', left)
    cursor, calls = reply[1], calls + 1
    for _, entry in ipairs(reply[2]) do
      -- Entries deleted from the stream while pending come back as nil.
      if entry then
        local task = entry_task(entry[2])
        out[#out + 1] = i
        out[#out + 1] = entry[1]
        out[#out + 1] = task
        left = left - 1
        redis.call('XCLAIM', KEYS[i], ARGV[1], ARGV[2], 0, entry[1],
          'IDLE', ARGV[5], 'JUSTID')
      end
    end
  until cursor == '0-0' or calls >= 8
end
return out
