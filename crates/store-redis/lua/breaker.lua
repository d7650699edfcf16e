-- breaker.lua: check or report a circuit breaker (see
-- crates/store/src/breakers.rs, whose `Breaker` is the same state machine
-- in Rust, run by the memory store). Closed: calls pass, each failure is
-- remembered with its time, and `failures` of them within the window open
-- it for the cool-down. Open: checks are refused until then; the first
-- check after it is the one probe (half-open, held by its token for the
-- probe lease; a lost probe frees it when the lease ends). The probe's
-- success closes it (the key goes), its failure opens it again; reports of
-- anyone else change nothing. The time is the server's (TIME), so every
-- process shares one clock. A closed breaker expires with its window; an
-- open one a day after its cool-down or lease, if nothing touches it.
--
-- KEYS[1]: breaker key {prefix}:{b.<hex>}:breaker (hash: s state 0 closed,
--          1 open, 2 half-open; u until, Unix ms; p the probe's token; f the
--          failures in the window, Unix ms, comma-separated, oldest first)
-- ARGV[1]: "check", "failure", "success" or "read"
-- ARGV[2]: the caller's token (who probes; who reports)
-- ARGV[3]: failures within the window that open it (>= 1)
-- ARGV[4]: the window, ms
-- ARGV[5]: the cool-down, ms
-- ARGV[6]: the probe lease, ms
-- Returns: {state after, a, b}:
--   check:   a = 0 pass, 1 probe, 2 refused; b = ms until a check may pass or probe (refused)
--   failure, success: a = 0 no change, 1 opened, 2 opened again (the probe failed), 3 closed; b = 0
--   read:    a = failures in the window; b = ms left open, or of the probe's lease (0 closed)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 's', 'u', 'p', 'f')
local state = tonumber(h[1] or '0') or 0
local until_ms = tonumber(h[2] or '0') or 0
local probe = h[3] or ''
local op, token = ARGV[1], ARGV[2]
local failures, window = tonumber(ARGV[3]), tonumber(ARGV[4])
local cool_down, lease = tonumber(ARGV[5]), tonumber(ARGV[6])
local DAY = 86400000

-- Open (1) or half-open (2) until `u`, held by `p`.
local function hold(s, u, p)
  redis.call('HSET', KEYS[1], 's', s, 'u', string.format('%d', u), 'p', p, 'f', '')
  redis.call('PEXPIRE', KEYS[1], u - now + DAY)
end

-- The failures still in the window, oldest first.
local function in_window()
  local kept = {}
  for at in string.gmatch(h[4] or '', '%d+') do
    local v = tonumber(at)
    if v > now - window then
      kept[#kept + 1] = v
    end
  end
  return kept
end

if op == 'check' then
  if state == 0 then
    return {0, 0, 0}
  end
  if now < until_ms then
    local due = until_ms
    -- Half-open: ask again when the probe's lease ends, or after a cool-down if sooner.
    if state == 2 and now + cool_down < due then
      due = now + cool_down
    end
    return {state, 2, math.max(due - now, 1)}
  end
  hold(2, now + lease, token)
  return {2, 1, 0}
elseif op == 'failure' then
  if state == 0 then
    local kept = in_window()
    while #kept >= failures do
      table.remove(kept, 1)
    end
    kept[#kept + 1] = now
    if #kept >= failures then
      hold(1, now + cool_down, '')
      return {1, 1, 0}
    end
    local f = {}
    for i, v in ipairs(kept) do
      f[i] = string.format('%d', v)
    end
    redis.call('HSET', KEYS[1], 's', 0, 'f', table.concat(f, ','))
    redis.call('PEXPIRE', KEYS[1], window + 1000)
    return {0, 0, 0}
  end
  if state == 2 and probe == token then
    hold(1, now + cool_down, '')
    return {1, 2, 0}
  end
  return {state, 0, 0}
elseif op == 'success' then
  if state == 2 and probe == token then
    redis.call('DEL', KEYS[1])
    return {0, 3, 0}
  end
  return {state, 0, 0}
end
local left = 0
if state ~= 0 then
  left = math.max(until_ms - now, 0)
end
return {state, #in_window(), left}
