-- task.lua: how a task is stored. Not a script of its own: `scripts.rs` puts
-- it in front of every script that reads or writes a task (Redis has no
-- includes), so the layout is written once. `record.rs` is its Rust twin.
--
-- A task is one string key, {prefix}:{pNN}:task:<id>, holding
--   "<rev> <attempt> <status>\n<doc>"
-- doc being the whole task as JSON (what readers decode and channels carry)
-- and the header the three fields scripts decide on without decoding JSON.
-- One string rather than a hash of four fields: a hash holding a doc this
-- size is hashtable-encoded at ~70 bytes a field, ~250 bytes a task more.
--
-- Records written before this layout are hashes (fields doc, rev, attempt,
-- status): task_load reads them too, and the next task_store turns one into
-- a string, keeping its expiry. A value that is neither reads as no task.

-- Returns rev, attempt, status, doc (strings), or nothing when there is no
-- task at `key`.
local function task_load(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    local h = redis.call('HMGET', key, 'rev', 'attempt', 'status', 'doc')
    if not h[1] then
      return
    end
    return h[1], h[2] or '0', h[3], h[4]
  end
  if not v then
    return
  end
  local rev, attempt, status, at = string.match(v, '^(%d+) (%d+) (%S+)\n()')
  if not at then
    return
  end
  return rev, attempt, status, string.sub(v, at)
end

-- Write a task, keeping the key's expiry (set once, at creation).
local function task_store(key, rev, attempt, status, doc)
  redis.call('SET', key, rev .. ' ' .. attempt .. ' ' .. status .. '\n' .. doc, 'KEEPTTL')
end

local function task_over(status)
  return status == 'completed' or status == 'failed' or status == 'cancelled'
end
