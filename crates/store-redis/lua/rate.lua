-- rate.lua: take one of a rate (GCRA, see crates/store/src/rates.rs, whose
-- `Rate::take` is the same rule in Rust, run by the memory store): the key
-- holds the rate's theoretical arrival time (TAT), when its bucket would be
-- empty again. A take is admitted when the TAT is at most the burst's
-- tolerance ahead of now, and moves it one interval on (from now, if it was
-- behind); a refused take changes nothing. The time is the server's (TIME),
-- so every process shares one clock. The key expires when the bucket is
-- empty, so an idle rate leaves nothing.
--
-- KEYS[1]: rate key {prefix}:{r.<hex>}:rate (string: the TAT, Unix µs)
-- ARGV[1]: the interval one take uses, µs
-- ARGV[2]: the tolerance, µs (interval × (burst - 1))
-- ARGV[3]: "reserve" to reserve the next free turn when refused now, or ""
-- Returns: 0 admitted now; n > 0: µs until a take would pass (refused,
--          nothing taken), or until the reserved turn (with "reserve").

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat < now then
  tat = now
end
local ahead = tat - now
local tolerance = tonumber(ARGV[2])
local wait = 0
if ahead > tolerance then
  wait = ahead - tolerance
  if ARGV[3] ~= 'reserve' then
    return wait
  end
end
local next_tat = tat + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', math.floor((next_tat - now) / 1000) + 1)
return wait
