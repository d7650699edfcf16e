-- group.lua: what the calls of one script share. Not a script of its own:
-- `scripts.rs` puts it in front of every script that runs create.lua,
-- admit.lua, bytes.lua or transition.lua, so that the calls batch.lua runs
-- in one script (group commit) pay once a script, not once a call, for what
-- is per key (a scope's counts, a stream, an index) rather than per task.
--
-- known(key, what) / know(key, what, value): what this script read or made
--   true of `key` (`what` names it: 'card', 'expiry', 'value'…); nil when
--   it does not know. A read answered from it is a command less. Every
--   write a script makes to such a key updates (or forgets, with nil) what
--   it knows of it, so a later call of a batch sees what an earlier one
--   wrote; nothing else changes a key while a script runs, and each run of
--   a script starts knowing nothing.
-- group_xdel(stream, cgroup, id), group_zrem(key, member): acknowledge and
--   delete a work entry; remove a task from its scope's active set
--   (active_remove). A script alone makes them at once. In a batch (between
--   group_open and group_close) they are held and made by group_close, one
--   XACK and one XDEL a stream, one active_remove a set, for all the
--   batch's calls: no later call reads them back (a call's own entry and
--   member are its task's alone).
-- ACTIVE_PAD, active_remove(key, ...): the member admit.lua adds to every
--   scope's active set beside its tasks (see there: it keeps the set a
--   skiplist), and the removal of tasks from such a set, which deletes a
--   set left with its pad alone, as Redis deletes an empty one.
-- group_hold(name, settle): in a batch, `settle` (a function) is run once by
--   group_close, in the order first held, for held writes of another part
--   (bytes.lua's counts); `name` (a string, or any value) tells one held
--   write from another. Returns false outside a batch (write at once).
-- group_number(s): tonumber(s), remembered for the script's run: a batch's
--   calls pass the same limits and times (and a create's admission and its
--   index read the same expiry), and each tonumber (strtod) costs Redis
--   about 1,200 instructions.

local group_known = {}
local group_numbers = {}
-- In a batch: {settle = name -> the function making its held writes,
-- order = the names in the order first held, lists = name -> held
-- arguments}; nil when a script runs alone.
local group_held = nil

local function known(key, what)
  local k = group_known[key]
  return k and k[what]
end

local function know(key, what, value)
  local k = group_known[key]
  if not k then
    k = {}
    group_known[key] = k
  end
  k[what] = value
  return value
end

local function group_number(s)
  local n = group_numbers[s]
  if n == nil then
    n = tonumber(s)
    group_numbers[s] = n
  end
  return n
end

local function group_hold(name, settle)
  if not group_held then
    return false
  end
  if not group_held.settle[name] then
    group_held.settle[name] = settle
    group_held.order[#group_held.order + 1] = name
  end
  return true
end

-- `arg` added to the list held for `key` (and `sub`) of kind `kind`
-- ('xdel', 'zrem'), made by `make` at group_close with up to 1000 of them at
-- a time (unpack's bound, Lua's stack, stays far away); false outside a
-- batch. The lists are found by table, not by a name made of the keys: a
-- concatenation costs every call a new string.
local function group_append(kind, key, sub, arg, make)
  if not group_held then
    return false
  end
  local by_key = group_held.lists[kind]
  if not by_key then
    by_key = {}
    group_held.lists[kind] = by_key
  end
  local by_sub = by_key[key]
  if not by_sub then
    by_sub = {}
    by_key[key] = by_sub
  end
  local list = by_sub[sub]
  if not list then
    list = {}
    by_sub[sub] = list
    group_hold(list, function()
      for i = 1, #list, 1000 do
        make(unpack(list, i, math.min(#list, i + 999)))
      end
    end)
  end
  list[#list + 1] = arg
  return true
end

local function group_xdel(stream, cgroup, id)
  know(stream, 'len', nil) -- create.lua's count, made again when asked
  local held = group_append('xdel', stream, cgroup, id, function(...)
    redis.call('XACK', stream, cgroup, ...)
    redis.call('XDEL', stream, ...)
  end)
  if not held then
    redis.call('XACK', stream, cgroup, id)
    redis.call('XDEL', stream, id)
  end
end

-- Longer than zset-max-listpack-value (64 B by default); never a task id.
local ACTIVE_PAD = '(not a task: this member keeps the set a skiplist, so that adding a task is not a scan)'

local function active_remove(key, ...)
  redis.call('ZREM', key, ...)
  if redis.call('ZCARD', key) == 1 then
    redis.call('ZREM', key, ACTIVE_PAD)
  end
end

local function group_zrem(key, member)
  know(key, 'card', nil) -- admit.lua's count, made again when asked
  local held = group_append('zrem', key, '', member, function(...)
    active_remove(key, ...)
  end)
  if not held then
    active_remove(key, member)
  end
end

-- A batch starts: writes are held from here.
local function group_open()
  group_held = { settle = {}, order = {}, lists = {} }
end

-- A batch ends (or fails): the held writes are made, in the order first held.
local function group_close()
  local held = group_held
  group_held = nil
  if held then
    for _, name in ipairs(held.order) do
      held.settle[name]()
    end
  end
end
