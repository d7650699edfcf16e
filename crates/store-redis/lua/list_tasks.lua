-- list_tasks.lua: one partition's part of an admin task listing: the next
-- entries of its task indexes, newest first, as cursors "<ms>-<seq>.<id>"
-- (the index entry's stream id and the task id), not the tasks themselves (a
-- listing merges every partition's, then reads only its page's tasks).
--
-- KEYS[1]: the partition's tenants {prefix}:{pNN}:ixt (see create.lua)
-- ARGV[1]: the partition's task index prefix {prefix}:{pNN}:ix:
-- ARGV[2]: one hex tenant, or "" for every tenant KEYS[1] names
-- ARGV[3]: the newest bound (XREVRANGE end): "+", "(<ms>-<seq>" (before it),
--          or "<ms>-<seq>" (a cursor's own id: an entry with that id counts
--          only when its task id is below ARGV[8])
-- ARGV[4]: the oldest bound (XREVRANGE start): "-", or "<ms>" (at or after)
-- ARGV[5]: at most this many cursors
-- ARGV[6]: the partition's task key prefix {prefix}:{pNN}:task:
-- ARGV[7]: now, Unix ms (indexes expired by then are not read)
-- ARGV[8]: the cursor's task id, or ""
-- Returns: up to ARGV[5] cursors whose task exists, newest first. An entry
--          whose task is gone (expired) is dropped from its index on the way
--          (at most ten reads per index, so one call stays bounded).
--
-- The index keys are built here from ARGV[1], not passed in KEYS: they are
-- only known from KEYS[1], and share its slot (the partition's hash tag).

local want = tonumber(ARGV[5])
local tenants
if ARGV[2] ~= '' then
  tenants = { ARGV[2] }
else
  tenants = redis.call('ZRANGE', KEYS[1], '(' .. ARGV[7], '+inf', 'BYSCORE')
end

-- "<ms>-<seq>" as two numbers (ms fits a double exactly).
local function id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local out, order = {}, {}
for _, tenant in ipairs(tenants) do
  local index = ARGV[1] .. tenant
  local upper, got = ARGV[3], 0
  for _ = 1, 10 do
    if got >= want then
      break
    end
    local entries = redis.call('XREVRANGE', index, upper, ARGV[4], 'COUNT', want - got + 1)
    if #entries == 0 then
      break
    end
    for _, e in ipairs(entries) do
      local id = e[2][2]
      local tied = e[1] == ARGV[3] and id >= ARGV[8]
      if got < want and not tied then
        if redis.call('EXISTS', ARGV[6] .. id) == 1 then
          local ms, seq = id_parts(e[1])
          out[#out + 1] = e[1] .. '.' .. id
          order[#out] = { ms, seq, id }
          got = got + 1
        else
          redis.call('XDEL', index, e[1])
        end
      end
    end
    upper = '(' .. entries[#entries][1]
  end
end
if #tenants > 1 then
  local idx = {}
  for i = 1, #out do
    idx[i] = i
  end
  table.sort(idx, function(a, b)
    local x, y = order[a], order[b]
    if x[1] ~= y[1] then
      return x[1] > y[1]
    end
    if x[2] ~= y[2] then
      return x[2] > y[2]
    end
    return x[3] > y[3]
  end)
  local sorted = {}
  for i = 1, math.min(want, #idx) do
    sorted[i] = out[idx[i]]
  end
  return sorted
end
return out
