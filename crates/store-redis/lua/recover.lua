-- recover.lua: take over up to N work entries whose lease lapsed (idle for
-- at least the horizon H), partition after partition, in one round trip.
-- The keys span slots: standalone Redis only; cluster mode sends each
-- partition its own XAUTOCLAIM instead.
--
-- Shares its loop with read.lua on purpose: Redis runs each script alone
-- (no includes), so the flat-array packing is written in both.
--
-- KEYS[1..n]: work streams {prefix}:{pNN}:work, in the order to serve them
-- ARGV[1]: consumer group
-- ARGV[2]: consumer (the recovering worker)
-- ARGV[3]: H, the min idle time in ms (`max_lease`)
-- ARGV[4]: N, the most entries to take
-- Returns: a flat array {key index, entry id, task id, ...} (task id "" when
--          the entry has no `task` field).

local left = tonumber(ARGV[4])
local out = {}
for i = 1, #KEYS do
  if left <= 0 then
    break
  end
  local reply = redis.call('XAUTOCLAIM', KEYS[i], ARGV[1], ARGV[2], ARGV[3],
    '0-0', 'COUNT', left)
  for _, entry in ipairs(reply[2]) do
    -- Entries deleted from the stream while pending come back as nil.
    if entry then
      local task = ''
      local fields = entry[2]
      if fields then
        for j = 1, #fields, 2 do
          if fields[j] == 'task' then
            task = fields[j + 1]
          end
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
