-- claim_batch.lua: claim.lua for a batch of delivered work entries in one
-- round trip: each entry is claimed, dropped or reported exactly as
-- claim.lua would (same checks, same writes, same fence), one after another,
-- except that a fresh delivery keeps the lease it came with (ARGV[5n+5]).
-- With entries of several partitions it spans slots: standalone Redis only;
-- cluster mode runs it once per partition.
--
-- KEYS[4i-3]: entry i's task key        {prefix}:{pNN}:task:<id> (task.lua)
-- KEYS[4i-2]: entry i's work stream     {prefix}:{pNN}:work
-- KEYS[4i-1]: entry i's events channel  {prefix}:{pNN}:events:<id>
-- KEYS[4i]:   entry i's claimed channel {prefix}:{pNN}:claimed (claim.lua's KEYS[4])
-- ARGV[1]: consumer group
-- ARGV[2]: consumer (the claiming worker)
-- ARGV[3]: idle time to set, ms (H - lease)
-- ARGV[4]: publish command: "PUBLISH" (standalone) or "SPUBLISH" (cluster)
-- ARGV[5i], ARGV[5i+1], ARGV[5i+2], ARGV[5i+3], ARGV[5i+4]: entry i's work
--          entry id, expected stored rev, new doc (attempt + 1, rev + 1),
--          new rev, new attempt (the doc's at the expected rev + 1: "1"
--          for a first claim; the stored attempt is not read, see claim.lua)
-- ARGV[5n+5] (n entries; optional): how old, ms, the lease of a delivery
--          may be for a claim to keep it (`read.lua` and `recover.lua` set it
--          as they deliver) rather than start a new one: an entry read that
--          recently skips its XCLAIM, the priciest command of a claim. Its
--          lease then runs from the read, at most this much before the
--          claim; the worker renews a third of a lease after the claim.
-- Returns: one reply per entry, in order, claim.lua's without its table (a
--          table in a script's reply costs Redis about 5,000 instructions to
--          turn into RESP): 1 claimed; -1 dropped (task terminal or gone:
--          entry acked and deleted; or the entry is no longer pending for
--          this consumer); the task's doc when rev moved, 0 when the task
--          vanished meanwhile (nothing written for it: re-read and retry
--          that one).

local out = {}
local n = #KEYS / 4
local keep = tonumber(ARGV[5 * n + 5] or '')
local idle = tonumber(ARGV[3])
for i = 1, n do
  local task, stream, channel, claimed = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local entry, rev, doc, new_rev, attempt =
    ARGV[5 * i], ARGV[5 * i + 1], ARGV[5 * i + 2], ARGV[5 * i + 3], ARGV[5 * i + 4]
  local cur_rev, status, string_record = task_rev_status(task)
  if not cur_rev or task_over(status) then
    redis.call('XACK', stream, ARGV[1], entry)
    redis.call('XDEL', stream, entry)
    out[i] = -1
  elseif cur_rev ~= rev then
    out[i] = task_doc(task) or 0
  else
    local pending = redis.call('XPENDING', stream, ARGV[1], entry, entry, 1)
    if #pending == 0 or pending[1][2] ~= ARGV[2] then
      out[i] = -1
    else
      -- XPENDING's idle time is the lease set at delivery (H - lease) plus
      -- the time since.
      if not keep or pending[1][3] - idle > keep then
        redis.call('XCLAIM', stream, ARGV[1], ARGV[2], 0, entry, 'IDLE', ARGV[3], 'JUSTID')
      end
      task_store(task, new_rev, attempt, string_record and status or nil, doc, string_record)
      redis.call(ARGV[4], channel, doc)
      if attempt ~= '1' then -- claimed before (see claim.lua)
        redis.call(ARGV[4], claimed, string.match(task, '[^:]+$') .. '\n' .. doc)
      end
      out[i] = 1
    end
  end
end
return out
