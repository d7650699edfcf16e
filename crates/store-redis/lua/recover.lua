-- recover.lua: take over up to N work entries whose lease lapsed (idle for
-- at least the horizon H), partition after partition, in one round trip.
-- With several partitions it spans slots: standalone Redis only; cluster
-- mode runs it once per partition (its two keys share the partition's slot).
--
-- Each partition's sweep goes on where the last pass (of any worker: the
-- cursor is kept in Redis) stopped, so a pass's cost does not grow with the
-- pending list: one XAUTOCLAIM looks at no more than COUNT * 10 pending
-- entries, and a long run of live ones (running or parked tasks, held
-- work) is walked across passes instead of rescanned from 0-0 by each.
-- When the sweep reaches the end of the list it wraps: one more call from
-- 0-0 in the same pass, if the pass started past the head and still has
-- room. A lapsed entry is thus found within (pending entries) / (COUNT * 10)
-- passes of that partition, whoever runs them.
--
-- XAUTOCLAIM resets an entry's idle time to 0; it is set to H - lease in the
-- same step, so an entry whose recoverer dies before `claim.lua` is
-- recoverable again one lease later (as in read.lua).
--
-- stream.lua (in front of this script) parses the entries' fields.
--
-- KEYS[2i-1]: work stream {prefix}:{pNN}:work of the i-th partition, in the
--             order to serve them
-- KEYS[2i]:   its recovery cursor {prefix}:{pNN}:recovery (string: the entry
--             id the next sweep starts at; missing: 0-0)
-- ARGV[1]: consumer group
-- ARGV[2]: consumer (the recovering worker)
-- ARGV[3]: H, the min idle time in ms (`max_lease`)
-- ARGV[4]: N, the most entries to take
-- ARGV[5]: idle time to set on taken entries, ms (H - lease)
-- Returns: a flat array {partition index i, entry id, task id, ...} (task id
--          "" when the entry has no `task` field).

local left = tonumber(ARGV[4])
local out = {}
for i = 1, #KEYS / 2 do
  if left <= 0 then
    break
  end
  local stream, at = KEYS[2 * i - 1], KEYS[2 * i]
  local start = redis.call('GET', at) or '0-0'
  local cursor, calls = start, 0
  repeat
    local reply = redis.call('XAUTOCLAIM', stream, ARGV[1], ARGV[2], ARGV[3],
      cursor, 'COUNT', left)
    cursor, calls = reply[1], calls + 1
    for _, entry in ipairs(reply[2]) do
      -- Entries deleted from the stream while pending come back as nil.
      if entry then
        out[#out + 1] = i
        out[#out + 1] = entry[1]
        out[#out + 1] = entry_task(entry[2])
        left = left - 1
        redis.call('XCLAIM', stream, ARGV[1], ARGV[2], 0, entry[1],
          'IDLE', ARGV[5], 'JUSTID')
      end
    end
  -- Wrapped to 0-0 having started past the head: once more from the head.
  until not (cursor == '0-0' and start ~= '0-0' and calls == 1 and left > 0)
  if cursor == '0-0' then
    redis.call('DEL', at)
  elseif cursor ~= start then
    redis.call('SET', at, cursor)
  end
end
return out
