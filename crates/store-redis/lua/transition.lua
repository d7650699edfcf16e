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
-- ARGV[9]: the task id
-- KEYS[5] (standalone only, where the scope's keys may share a script with
--          the task's): the scope's active set (see admit.lua), from which
--          the task is removed when this write ends it. A cluster removes
--          it in a step of its own (forget.lua).
-- KEYS[6], ARGV[10..11] (standalone only): the scope's byte-quota buckets
--          (as quota.lua; bytes.lua's layout), the byte quota to refuse
--          this write's growth past it ("" never refuses: a worker's write,
--          or one that ends the task) and now, Unix ms. A task reserved
--          under the quota (one with a `q`, task.lua) is counted at its new
--          size, and its `q` rewritten with it; one without has nothing
--          counted. A cluster counts in a step of its own (resize.lua).
-- ARGV[12] (cluster only): "1" when this write's size is counted after it
--          lands (resize.lua): a task with a `q` has it rewritten at the new
--          size, and the reply carries the one before; "" leaves `q` as it
--          is (a worker's write counted later, at the task's end)
-- Returns: 1 when written and published ({1, q before} on a cluster when
--          ARGV[12] is "1" and the task has a `q`); {0, doc} on conflict (rev
--          moved, fence stale, or stored status terminal), {0} when the task
--          is gone; 2 when the byte quota refuses the growth (nothing
--          written). The usual answers are numbers, not tables: a table in
--          a reply costs Redis about 5,000 instructions.

local rev, attempt, status, string_record, counted = task_head(KEYS[1])
if not rev then
  return {0}
end
if task_over(status) or rev ~= ARGV[1] or (ARGV[2] ~= '' and attempt ~= ARGV[2]) then
  return {0, task_doc(KEYS[1])}
end
local q, reply = nil, 1
if KEYS[6] then
  if counted then
    local quota = nil
    if ARGV[10] ~= '' then
      quota = group_number(ARGV[10])
    end
    q = quota_resize(KEYS[6], counted, #ARGV[3], quota, ARGV[11])
    if not q then
      return 2
    end
  end
elseif counted and ARGV[12] == '1' then
  q = #ARGV[3] .. ':' .. string.match(counted, ':(%S+)$')
  reply = {1, counted}
end
task_store(KEYS[1], ARGV[4], attempt, ARGV[5], ARGV[3], string_record, q)
redis.call(ARGV[6], KEYS[2], ARGV[3])
if ARGV[2] == '' and attempt ~= '0' then
  redis.call(ARGV[6], KEYS[4], ARGV[9] .. '\n' .. ARGV[3])
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
