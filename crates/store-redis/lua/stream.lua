-- stream.lua: helpers the work-stream scripts share (read, recover, unhold,
-- stats). Redis runs each script alone, with no includes, so this file is
-- put in front of each of them (see scripts.rs), like task.lua.
--
-- flat_map(flat): the table of a flat {key, value, ...} reply (an entry's
--   fields, an XINFO record); an empty table for nil.
-- entry_task(fields): the `task` field of an entry's fields ('' when none).
-- held_consumers(stream, group): the group's `held:` consumers (work held
--   for a principal without room, see unhold.lua), each {name, pending}.

local function flat_map(flat)
  local map = {}
  if flat then
    for j = 1, #flat, 2 do
      map[flat[j]] = flat[j + 1]
    end
  end
  return map
end

local function entry_task(fields)
  return flat_map(fields).task or ''
end

local function held_consumers(stream, group)
  local held = {}
  for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', stream, group)) do
    local info = flat_map(c)
    if info.name and string.sub(info.name, 1, 5) == 'held:' then
      held[#held + 1] = {info.name, info.pending or 0}
    end
  end
  return held
end

