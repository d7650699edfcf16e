-- read.lua: read up to N new work entries for one consumer, partition after
-- partition, in one round trip. (A plain multi-stream XREADGROUP applies
-- COUNT per stream and would over-deliver up to N per partition.)
-- With several keys it spans slots: standalone Redis only; cluster mode
-- runs it once per partition (one key).
--
-- Every delivered entry gets its idle time set to H - lease in the same
-- step (XCLAIM ... IDLE, same consumer), so an entry whose reader dies
-- before `claim.lua` is recoverable one lease later, not after H: there is
-- no instant at which a delivered entry sits at idle 0.
--
-- When it delivered fewer than N, every stream is drained, and it also
-- returns each stream's last entry id: a blocking `XREAD` (not XREADGROUP:
-- it delivers nothing, so a reader dying there loses nothing) from those ids
-- wakes on exactly the entries added since.
--
-- stream.lua (in front of this script, after task.lua) parses the
-- entries' fields.
--
-- With ARGV[5..4+n] (standalone only) it also returns each delivered
-- entry's task doc, saving the claimer a round trip: those are the one
-- place a script reads keys it was not given in KEYS (the task keys,
-- named by their entries, see task.lua), which standalone Redis allows and a cluster
-- does not promise; cluster mode passes no prefixes and reads the docs
-- itself.
--
-- KEYS[1..n]: work streams {prefix}:{pNN}:work, in the order to serve them
-- ARGV[1]: consumer group
-- ARGV[2]: consumer (the claiming worker)
-- ARGV[3]: N, the most entries to read
-- ARGV[4]: idle time to set on delivered entries, ms (H - lease)
-- ARGV[4+i] (optional, for each KEYS[i]): the task key prefix of that
--          stream's partition, {prefix}:{pNN}:task: (the task id follows)
-- Returns: {entries, cursors, docs}: entries a flat array {key index, entry
--          id, task id, ...} (task id "" when the entry has no `task`
--          field); cursors the last entry id of each stream ("0-0" when
--          empty), or an empty array when N entries were delivered; docs,
--          when prefixes were given, the doc of each delivered entry's
--          task in order (false when there is none), else empty.

local left = tonumber(ARGV[3])
local with_docs = #ARGV >= 4 + #KEYS
local out = {}
local docs = {}
-- For each stream that delivered fewer entries than it was asked for (so
-- it is drained), the last one: its last entry id, which the cursors then
-- need no XREVRANGE for.
local drained_at = {}
-- Sets the idle time of `ids` (entries of `stream` just delivered) in one
-- XCLAIM, not one an entry (each redis.call costs about 0.75 µs); the ids
-- table is reused for the options.
local function lease(stream, ids)
  ids[#ids + 1] = 'IDLE'
  ids[#ids + 1] = ARGV[4]
  ids[#ids + 1] = 'JUSTID'
  redis.call('XCLAIM', stream, ARGV[1], ARGV[2], 0, unpack(ids))
end
for i = 1, #KEYS do
  if left <= 0 then
    break
  end
  local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2],
    'COUNT', left, 'STREAMS', KEYS[i], '>')
  if reply then
    local ids = {}
    local last
    for _, entry in ipairs(reply[1][2]) do
      local task = entry_task(entry[2])
      out[#out + 1] = i
      out[#out + 1] = entry[1]
      out[#out + 1] = task
      if with_docs then
        docs[#docs + 1] = task ~= '' and task_doc(ARGV[4 + i] .. task) or false
      end
      left = left - 1
      last = entry[1]
      ids[#ids + 1] = entry[1]
      if #ids == 1000 then -- unpack's bound (Lua's stack) stays far away
        lease(KEYS[i], ids)
        ids = {}
      end
    end
    if #ids > 0 then
      lease(KEYS[i], ids)
    end
    -- Fewer than asked: drained (all it was asked makes left 0, and then
    -- no cursors are made).
    drained_at[i] = last
  end
end
local cursors = {}
if left > 0 then
  for i = 1, #KEYS do
    if drained_at[i] then
      cursors[i] = drained_at[i]
    else
      local last = redis.call('XREVRANGE', KEYS[i], '+', '-', 'COUNT', 1)
      cursors[i] = last[1] and last[1][1] or '0-0'
    end
  end
end
return {out, cursors, docs}
