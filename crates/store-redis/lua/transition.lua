-- transition.lua: compare-and-set a task computed by the reducer in Rust.
--
-- KEYS[1]: task key        {prefix}:{pNN}:task:<id> (see task.lua)
-- KEYS[2]: events channel  {prefix}:{pNN}:events:<id>
-- KEYS[3]: work stream     {prefix}:{pNN}:work
-- KEYS[4]: claimed channel {prefix}:{pNN}:claimed: a client's write (no
--          fence) to a task some worker has claimed (attempt > 0) is
--          published there too, as "<task id>\n<doc>", for the worker
--          running it (`claimed.rs`): it watches that one channel per
--          partition instead of each task's own, and never hears its own writes
-- ARGV[1]: expected stored rev (next.revision - 1)
-- ARGV[2]: the worker's fencing attempt, or "" for a client write
-- ARGV[3]: new doc (task JSON)
-- ARGV[4]: new rev
-- ARGV[5]: new status
-- ARGV[6]: publish command: "PUBLISH" (standalone) or "SPUBLISH" (cluster)
-- ARGV[7]: consumer group
-- ARGV[8]: a worker's work entry id, or "": when this write ends the task,
--          the entry is acked and deleted with it (remove_work.lua's job,
--          without its round trip; the fence check above is its check)
-- KEYS[5], ARGV[9] (standalone only, where the scope's keys may share a
--          script with the task's): the scope's active set (see admit.lua)
--          and the task id, removed from it when this write ends the task.
--          A cluster removes it in a step of its own (`forget_active`).
-- KEYS[6..9], ARGV[10..11] (standalone only): the scope's byte-quota keys
--          (as quota.lua: buckets, legacy reservations, sizes, total; bytes.lua's
--          layout), the byte quota to refuse this write's growth past it
--          ("" never refuses: a worker's write, or one that ends the task)
--          and now, Unix ms. A task with a reservation is counted at its new
--          size: one reserved under the buckets by its `q` (task.lua), which
--          is rewritten with it, a legacy one in the legacy keys. A cluster
--          counts in a step of its own (resize.lua).
-- ARGV[12] (standalone only): the task's legacy reservation score (its
--          expiry, `records/quota.rs` reservation_expiry), at which a write
--          ending the task settles a legacy reservation (bytes.lua's
--          bytes_resize)
-- ARGV[13] (cluster only): "1" when this write's size is counted after it
--          lands (resize.lua): a task with a `q` has it rewritten at the new
--          size, and the reply carries the one before; "" leaves `q` as it
--          is (a worker's write counted later, at the task's end)
-- Returns: {1} when written and published ({1, q before} on a cluster when
--          ARGV[13] is "1" and the task has a `q`); {0, doc} on conflict (rev
--          moved, fence stale, or stored status terminal), {0} when the task
--          is gone; {2} when the byte quota refuses the growth (nothing written).

local rev, attempt, status, string_record, counted = task_head(KEYS[1])
if not rev then
  return {0}
end
if task_over(status) or rev ~= ARGV[1] or (ARGV[2] ~= '' and attempt ~= ARGV[2]) then
  return {0, task_doc(KEYS[1])}
end
local q, reply = nil, {1}
if KEYS[6] then
  local scope_bytes = { KEYS[6], KEYS[7], KEYS[8], KEYS[9] }
  local quota = nil
  if ARGV[10] ~= '' then
    quota = group_number(ARGV[10])
  end
  if counted then
    q = quota_resize(scope_bytes, counted, #ARGV[3], quota, ARGV[11])
    if not q then
      return {2}
    end
  else
    local settle = task_over(ARGV[5]) and ARGV[12] or nil
    if bytes_resize(scope_bytes, ARGV[9], #ARGV[3], quota, ARGV[11], settle) == false then
      return {2}
    end
  end
elseif counted and ARGV[13] == '1' then
  q = #ARGV[3] .. ':' .. string.match(counted, ':(%S+)$')
  reply = {1, counted}
end
task_store(KEYS[1], ARGV[4], attempt, ARGV[5], ARGV[3], string_record, q)
redis.call(ARGV[6], KEYS[2], ARGV[3])
if ARGV[2] == '' and attempt ~= '0' then
  redis.call(ARGV[6], KEYS[4], string.match(KEYS[1], '[^:]+$') .. '\n' .. ARGV[3])
end
if task_over(ARGV[5]) then
  -- In a batch, one XACK, one XDEL and one ZREM for all its calls (group.lua).
  if ARGV[8] ~= '' then
    group_xdel(KEYS[3], ARGV[7], ARGV[8])
  end
  if KEYS[5] then
    group_zrem(KEYS[5], ARGV[9])
  end
end
return reply
