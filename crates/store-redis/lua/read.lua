-- read.lua: read up to N new work entries for one consumer, partition after
-- partition, in one round trip. (A plain multi-stream XREADGROUP applies
-- COUNT per stream and would over-deliver up to N per partition.)
-- The keys span slots: standalone Redis only; cluster mode reads each
-- partition with its own XREADGROUP instead.
--
-- Shares its loop with recover.lua on purpose: Redis runs each script
-- alone (no includes), so the flat-array packing is written in both.
--
-- KEYS[1..n]: work streams {prefix}:{pNN}:work, in the order to serve them
-- ARGV[1]: consumer group
-- ARGV[2]: consumer (the claiming worker)
-- ARGV[3]: N, the most entries to read
-- Returns: a flat array {key index, entry id, task id, ...} (task id "" when
--          the entry has no `task` field).

local left = tonumber(ARGV[3])
local out = {}
for i = 1, #KEYS do
  if left <= 0 then
    break
  end
  local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2],
    'COUNT', left, 'STREAMS', KEYS[i], '>')
  if reply then
    for _, entry in ipairs(reply[1][2]) do
      local task = ''
      local fields = entry[2]
      for j = 1, #fields, 2 do
        if fields[j] == 'task' then
          task = fields[j + 1]
        end
      end
      out[#out + 1] = i
      out[#out + 1] = entry[1]
      out[#out + 1] = task
      left = left - 1
    end
  end
end
return out
