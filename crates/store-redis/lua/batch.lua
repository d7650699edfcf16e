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
-- KEYS: each call's keys, one call after another
-- ARGV: for each call in turn: the number of its keys, the number of its
--       arguments, then its arguments
-- Returns: one reply per call, in order, each as the body replied (nil as
--          nil). An error ends the script as it would end the body alone:
--          the calls before it stay written (their held writes are made
--          before the error is raised again), and every call of the batch
--          is answered with the error.

local out = {}
local function run()
  local n, k, a = 0, 0, 1
  while a <= #ARGV do
    local nk, na = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    local r = each({ unpack(KEYS, k + 1, k + nk) }, { unpack(ARGV, a + 2, a + 1 + na) })
    n = n + 1
    if r == nil then
      r = false
    end
    out[n] = r
    k, a = k + nk, a + 2 + na
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
