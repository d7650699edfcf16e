-- stats.lua: the work queue of one partition, for metrics, in one round trip
-- (read only, one key: works on a cluster as on a single server).
--
-- Every work entry is either not yet delivered to the group, or pending (in
-- the group's pending-entries list): every XACK here comes with its XDEL.
-- Pending entries that were handed back (`release.lua`, or over-delivered
-- entries a claimer returned: last delivery set to the Unix epoch, so their
-- idle time is decades) wait for a worker like new ones, so they count as
-- queued, not pending, exactly as in the memory store.
--
-- KEYS[1]: work stream  {prefix}:{pNN}:work
-- ARGV[1]: consumer group
-- ARGV[2]: idle time (ms) from which a pending entry counts as handed back
-- Returns: {queued, pending, age in ms of the oldest pending entry (from its
--          id's timestamp, by the server's clock) or -1 when none is pending}

local stream, group, handed_idle = KEYS[1], ARGV[1], tonumber(ARGV[2])
if redis.call('EXISTS', stream) == 0 then
  return {0, 0, -1}
end
local len = redis.call('XLEN', stream)
local found, lag = false, false
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local name, glag = nil, false
  for i = 1, #g, 2 do
    if g[i] == 'name' then
      name = g[i + 1]
    elseif g[i] == 'lag' then
      glag = g[i + 1]
    end
  end
  if name == group then
    found, lag = true, glag
  end
end
if not found then
  -- The group was lost; claims re-create it from the start: all queued.
  return {len, 0, -1}
end

local summary = redis.call('XPENDING', stream, group)
local pending = summary[1]
-- `lag` (Redis >= 7.0) counts the entries never delivered to the group. It
-- is nil before 7.0, and on 7.x when deletions make it unknowable; then
-- count instead: the entries that are not pending were never delivered.
local queued = lag
if type(queued) ~= 'number' then
  queued = len - pending
end

local oldest = summary[2]
local handed = 0
if pending > 0 then
  handed = #redis.call('XPENDING', stream, group, 'IDLE', handed_idle, '-', '+', pending)
  if handed > 0 then
    -- The oldest entry still held: the first one, by id, not handed back.
    oldest = false
    local start = '-'
    while handed < pending and not oldest do
      local page = redis.call('XPENDING', stream, group, start, '+', 100)
      if #page == 0 then
        break
      end
      for _, e in ipairs(page) do
        if e[3] < handed_idle then
          oldest = e[1]
          break
        end
      end
      start = '(' .. page[#page][1]
    end
  end
end

local age = -1
if oldest then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local at = tonumber(string.match(oldest, '^(%d+)'))
  age = math.max(0, now - at)
end
return {queued + handed, pending - handed, age}
