-- task.lua: how a task is stored. Not a script of its own: `scripts.rs` puts
-- it in front of every script that reads or writes a task (Redis has no
-- includes), so the layout is written once. `record.rs` is its Rust twin.
--
-- A task is one hash, {prefix}:{pNN}:task:<id>, of four fields:
--   rev      its revision, what compare-and-set compares
--   attempt  the fencing attempt of its latest claim
--   status   its status as on the wire (`working`, `completed`…)
--   doc      the whole task as JSON (what readers decode and channels carry)
-- and, for a task created under a byte quota, a fifth:
--   q        "<bytes>:<bucket>": the size its scope's quota counts it at,
--            and the expiry bucket that counts it (bytes.lua)
-- so scripts decide on rev, attempt and status without decoding JSON, and
-- hand back only the doc. The doc is longer than hash-max-listpack-value
-- (64 B by default), so the hash is hashtable-encoded: MEMORY USAGE of a
-- small finished task is 888 B against 632 B as one string, 120 B of it
-- the hashtable and 40 to 48 B each small field (docs/redis.md).
--
-- Tasks stored by an earlier release may be one string instead,
--   "<rev> <attempt> <status>\n<doc>"
-- task_load reads them too (no migration), and the next task_store turns
-- one into a hash, keeping its expiry. A string that is not a record reads
-- as no task.

-- Returns rev, attempt, status, doc (strings), and whether the key holds a
-- string record (for task_store); nothing when there is no task at `key`.
local function task_load(key)
  local h = redis.pcall('HMGET', key, 'rev', 'attempt', 'status', 'doc')
  if h.err then
    local v = redis.call('GET', key)
    local rev, attempt, status, at = string.match(v, '^(%d+) (%d+) (%S+)\n()')
    if not at then
      return
    end
    return rev, attempt, status, string.sub(v, at), true
  end
  if not h[1] then
    return
  end
  return h[1], h[2] or '0', h[3], h[4], false
end

-- Returns rev, attempt, status (strings), whether the key holds a string
-- record and its `q` (nil without), as task_load does but without the doc: a script that decides on
-- these alone spares copying the doc into Lua (about 0.8 µs a load), and
-- asks task_doc for it only when its answer carries it (a conflict).
local function task_head(key)
  local h = redis.pcall('HMGET', key, 'rev', 'attempt', 'status', 'q')
  if h.err then
    local rev, attempt, status, _, string_record = task_load(key)
    return rev, attempt, status, string_record
  end
  if not h[1] then
    return
  end
  return h[1], h[2] or '0', h[3], false, h[4] or nil
end

-- Returns rev and status (strings) and whether the key holds a string
-- record; nothing when there is no task at `key`. For a claim, which
-- compares the rev the reducer started from: when it matches, the stored
-- attempt is the one of the doc the reducer read at that rev (every write
-- sets rev and the other fields together), so it needs no reading here.
-- Each field an HMGET brings costs Redis about 1,300 instructions (its
-- argument, its lookup and its value into Lua), two against four.
local function task_rev_status(key)
  local h = redis.pcall('HMGET', key, 'rev', 'status')
  if h.err then
    local rev, _, status, _, string_record = task_load(key)
    return rev, status, string_record
  end
  if not h[1] then
    return
  end
  return h[1], h[2], false
end

-- The doc of the task at `key` (nil when there is none): one HGET, whose
-- reply is the doc alone (task_load's HMGET brings three more fields into
-- Lua); a string record (WRONGTYPE) is read by task_load.
local function task_doc(key)
  local doc = redis.pcall('HGET', key, 'doc')
  if type(doc) == 'table' then
    local _, _, _, d = task_load(key)
    return d
  end
  return doc or nil
end

-- Write a task, keeping the key's expiry (set once, at creation): a hash
-- written over keeps it by itself; a string record (`string_record`, as
-- task_load said) is replaced by a hash given its time left. With `q`, its
-- counted size is written too (other fields it has are kept). A nil
-- `status` leaves the stored one as it is (a claim, which never changes
-- it: one field fewer to write); a string record needs it.
local function task_store(key, rev, attempt, status, doc, string_record, q)
  local ttl
  if string_record then
    ttl = redis.call('PTTL', key)
    redis.call('DEL', key)
  end
  if q then
    redis.call('HSET', key, 'rev', rev, 'attempt', attempt, 'status', status, 'doc', doc, 'q', q)
  elseif status == nil then
    redis.call('HSET', key, 'rev', rev, 'attempt', attempt, 'doc', doc)
  else
    redis.call('HSET', key, 'rev', rev, 'attempt', attempt, 'status', status, 'doc', doc)
  end
  if ttl and ttl > 0 then
    redis.call('PEXPIRE', key, ttl)
  end
end

local function task_over(status)
  return status == 'completed' or status == 'failed' or status == 'cancelled'
end
