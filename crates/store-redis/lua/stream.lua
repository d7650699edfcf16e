-- stream.lua: helpers the work-stream scripts share (read, recover, unhold,
-- stats). Redis runs each script alone, with no includes, so this file is
-- put in front of each of them (see scripts.rs), like task.lua.
--
-- flat_map(flat): the table of a flat {key, value, ...} reply (an entry's
--   fields, an XINFO record); an empty table for nil.
-- entry_task(fields): the `task` field of an entry's fields ('' when none).
-- held_consumers(stream, group, stale): the group's `held:` consumers (work
--   held for a principal without room, see unhold.lua), each {name, pending}.
--   With `stale` (ms), any other consumer with nothing pending and idle for
--   longer is deleted on the way: a worker gone for good (each pod has a name
--   of its own) would otherwise stay in the group, and in every XINFO
--   CONSUMERS, forever. A live worker idle that long loses nothing (it holds
--   nothing) and is made again by its next read.

local function flat_map(flat)
  local map = {}
  if flat then
    for j = 1, #flat, 2 do
      map[flat[j]] = flat[j + 1]
    end
  end
  return map
end

-- (Found in place: a table made of the fields would cost each delivered
-- entry an allocation.)
local function entry_task(fields)
  if fields then
    for j = 1, #fields, 2 do
      if fields[j] == 'task' then
        return fields[j + 1]
      end
    end
  end
  return ''
end

local function held_consumers(stream, group, stale)
  local held = {}
  for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', stream, group)) do
    local info = flat_map(c)
    if info.name and string.sub(info.name, 1, 5) == 'held:' then
      held[#held + 1] = {info.name, info.pending or 0}
    elseif stale and info.name and info.pending == 0 and (info.idle or 0) > stale then
      redis.call('XGROUP', 'DELCONSUMER', stream, group, info.name)
    end
  end
  return held
end

