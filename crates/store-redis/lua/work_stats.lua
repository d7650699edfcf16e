-- work_stats.lua: the work queue of one partition, for metrics, in one round trip
-- (read only, one key: works on a cluster as on a single server).
-- stream.lua is in front of it.
--
-- Every work entry is either not yet delivered to the group, or pending (in
-- the group's pending-entries list): every XACK here comes with its XDEL.
-- Pending entries that were handed back (`release.lua`, or over-delivered
-- entries a claimer returned: last delivery set to the Unix epoch, so their
-- idle time is decades) wait for a worker like new ones, so they count as
-- queued, not pending, exactly as in the memory store; so are held entries
-- (owned by a `held:` consumer, see unhold.lua).
--
-- Work put off (defer.lua) waits in the delayed set, not in the stream: it
-- is counted apart, with how late its earliest due member is.
--
-- KEYS[1]: work stream  {prefix}:{pNN}:work
-- KEYS[2]: delayed set  {prefix}:{pNN}:delayed
-- ARGV[1]: consumer group
-- ARGV[2]: idle time (ms) from which a pending entry counts as handed back
-- Returns: {queued, pending, age in ms of the oldest pending entry (from its
--          id's timestamp, by the server's clock) or -1 when none is pending,
--          age in ms of the oldest queued entry (the first never delivered, or
--          the first handed back, whichever is older) or -1 when none is queued,
--          delayed members, ms since the earliest of them came due or -1 when
--          none is due}

local stream, group, handed_idle = KEYS[1], ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delayed = redis.call('ZCARD', KEYS[2])
local due_age = -1
if delayed > 0 then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  local at = tonumber(first[2])
  if at <= now then
    due_age = now - at
  end
end
if redis.call('EXISTS', stream) == 0 then
  return {0, 0, -1, -1, delayed, due_age}
end
-- Milliseconds since the entry `id` was added (its id's timestamp).
local function age_of(id)
  return math.max(0, now - tonumber(string.match(id, '^(%d+)')))
end
local len = redis.call('XLEN', stream)
local found, lag, delivered = false, false, '0-0'
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local info = flat_map(g)
  if info.name == group then
    found, lag, delivered = true, info.lag or false, info['last-delivered-id'] or '0-0'
  end
end
if not found then
  -- The group was lost; claims re-create it from the start: all queued.
  local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
  return {len, 0, -1, first[1] and age_of(first[1][1]) or -1, delayed, due_age}
end
-- The oldest entry never delivered to the group: the first after the last delivered one.
local fresh = redis.call('XRANGE', stream, '(' .. delivered, '+', 'COUNT', 1)
local oldest_queued = fresh[1] and fresh[1][1] or false

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
  local handed_back = redis.call('XPENDING', stream, group, 'IDLE', handed_idle, '-', '+', pending)
  handed = #handed_back
  if handed > 0 then
    -- Handed back entries wait like new ones; the first, by id, is the oldest.
    local first = handed_back[1][1]
    if not oldest_queued or age_of(first) > age_of(oldest_queued) then
      oldest_queued = first
    end
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

-- Held entries (pending for a `held:` consumer: work a claimer had no room
-- for, see unhold.lua) wait for a worker like new ones: queued too. (The
-- oldest pending age may still name one of them.)
local held = 0
if pending > handed then
  for _, c in ipairs(held_consumers(stream, group)) do
    local name, count = c[1], c[2]
    if count > 0 then
      held = held + count
      local first = redis.call('XPENDING', stream, group, '-', '+', 1, name)[1]
      if first and (not oldest_queued or age_of(first[1]) > age_of(oldest_queued)) then
        oldest_queued = first[1]
      end
    end
  end
end

local age = -1
if oldest then
  age = age_of(oldest)
end
local queued_age = -1
if oldest_queued then
  queued_age = age_of(oldest_queued)
end
return {queued + handed + held, pending - handed - held, age, queued_age, delayed, due_age}
