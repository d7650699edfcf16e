-- batch.lua: one script's body run for each call of a batch, in one round
-- trip (group commit, `batch.rs`). `scripts.rs` puts that body in front of
-- this one as the local function `each` of its own KEYS and ARGV
-- (create_scoped.lua for creates, transition.lua for a worker's concluding
-- writes), so each call gets exactly what it would have got alone. Calls
-- run one after another, in order: a later one sees what an earlier one
-- wrote (a second create under the same idempotency key replays the
-- first's task; a compare-and-set checks its own task's rev and fence, so a
-- stale call conflicts alone).
--
-- KEYS: each call's keys, one call after another
-- ARGV: for each call in turn: the number of its keys, the number of its
--       arguments, then its arguments
-- Returns: one reply per call, in order, each as the body replied (nil as
--          nil). An error ends the script as it would end the body alone:
--          the calls before it stay written, and every call of the batch is
--          answered with the error.

local out, n, k, a = {}, 0, 0, 1
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
return out
