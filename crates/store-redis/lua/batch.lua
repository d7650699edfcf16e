-- batch.lua: one script's body run for each call of a batch, in one round
-- trip (group commit, `batch.rs`). `scripts.rs` puts that body in front of
-- this one as the local function `each` of its own KEYS and ARGV
-- (create_scoped.lua for creates, transition.lua for a worker's concluding
-- writes), behind group.lua, so each call gets exactly what it would have
-- got alone. Calls run one after another, in order: a later one sees what
-- an earlier one wrote (a second create under the same idempotency key
-- replays the first's task; a compare-and-set checks its own task's rev and
-- fence, so a stale call conflicts alone). What no later call reads back
-- (group.lua: acks, set removals, a scope's byte counts) is written once
-- for the batch, after the last call.
--
-- The calls of a batch share most of their keys and arguments (a scope's
-- keys, the status, the group, the limits…), and each argument a script
-- is given costs Redis about as much as a short command (parsed, made a
-- Lua string, put in a table), so what every call has at a position is
-- passed once, as the batch's template, and each call passes only what
-- it has at the positions where the calls differ (`scripts.rs`
-- `Call::batch`).
--
-- KEYS[1..K]: the template's keys: at each position, the key the first
--             call with that position has there (K: the most keys a call has)
-- KEYS[K+1..]: each call's keys at the differing positions (up to its key
--             count), one call after another
-- ARGV[1]: n, the number of calls
-- ARGV[2], ARGV[3]: K, and A (the most arguments a call has)
-- ARGV[4], ARGV[5]: the positions where the calls' keys, and their
--          arguments, differ: "<position>,<position>…" in ascending order
--          ("" for none)
-- ARGV[6]: "1" when the calls' key and argument counts differ (each call
--          then says its own), "" when each call has K keys and A arguments
-- ARGV[7..6+A]: the template's arguments (as KEYS[1..K] for keys)
-- ARGV[7+A..]: for each call in turn: its key count and argument count
--          (only when ARGV[6] is "1"), then its arguments at the differing
--          positions (up to its argument count)
-- Returns: each call's reply in turn, flattened (a table in a script's
--          reply costs Redis about 5,000 instructions to turn into RESP,
--          the same elements in the outer table a few hundred): a body's
--          table reply of m elements as m followed by them, any other
--          reply (a number, a string, nil as nil) as -1 followed by it
--          (`scripts.rs` batch_replies reads it back). An error ends the
--          script as it would end the body alone:
--          the calls before it stay written (their held writes are made
--          before the error is raised again), and every call of the batch
--          is answered with the error.

-- A body neither changes nor keeps the KEYS and ARGV tables it is given:
-- when every call has K keys and A arguments they are the template's own,
-- patched in place for the next call (a copy a call costs two tables).

local out, o = {}, 0
-- The positions in `list` ("<position>,<position>…"), as numbers.
local function positions(list)
  local t = {}
  for q in string.gmatch(list, '%d+') do
    t[#t + 1] = tonumber(q)
  end
  return t
end
-- Puts src[at + 1], src[at + 2]… into `t` at the positions `pos` (ascending)
-- up to `count`, the call's own number of keys or arguments (every
-- position is within it when the calls' counts agree); returns the last
-- index of `src` taken.
local function patch(t, pos, count, src, at)
  for j = 1, #pos do
    local q = pos[j]
    if q > count then
      break
    end
    at = at + 1
    t[q] = src[at]
  end
  return at
end
local function run()
  local n, nk, na = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
  local kpos, apos = positions(ARGV[4]), positions(ARGV[5])
  local mixed = ARGV[6] ~= ''
  -- The template, changed at the differing positions into each call's.
  local keys, args = { unpack(KEYS, 1, nk) }, { unpack(ARGV, 7, 6 + na) }
  local k, a = nk, 6 + na -- the last key and argument taken
  for c = 1, n do
    local ck, ca = nk, na
    if mixed then
      ck, ca = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
      a = a + 2
    end
    k = patch(keys, kpos, ck, KEYS, k)
    a = patch(args, apos, ca, ARGV, a)
    local r
    if mixed then
      r = each({ unpack(keys, 1, ck) }, { unpack(args, 1, ca) })
    else
      r = each(keys, args)
    end
    if type(r) == 'table' then
      local m = #r
      out[o + 1] = m
      for i = 1, m do
        out[o + 1 + i] = r[i]
      end
      o = o + 1 + m
    else
      if r == nil then
        r = false
      end
      out[o + 1], out[o + 2] = -1, r
      o = o + 2
    end
  end
end
group_open()
local ok, err = pcall(run)
group_close()
if not ok then
  -- The error as the client would have had it uncaught: a command's keeps
  -- its code (WRONGTYPE, OOM, READONLY…), Lua's own is an ERR.
  if type(err) ~= 'string' or not string.find(err, '^%u+ ') then
    err = 'ERR ' .. tostring(err)
  end
  return redis.error_reply(err)
end
return out
