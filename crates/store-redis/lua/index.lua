-- index.lua: reading a lexically ordered index of cursors (`<time>.<id>`,
-- every score 0): the dead letters' and the admin task listing's. Not a
-- script of its own: `scripts.rs` puts it in front of `dead_list.lua` and
-- `task_list.lua`, so the paging is written once.

-- Up to `want` members of `index` from `from` towards `to` (ZRANGE BYLEX
-- bounds; `rev`: newest first, `from` being the upper bound) whose record
-- `prefix .. id` exists, appended to `out`. A member whose record is gone is
-- dropped from the index on the way (at most ten rounds, so a call stays
-- bounded). Returns how many were appended.
local function index_page(index, from, to, want, rev, prefix, out)
  local got = 0
  for _ = 1, 10 do
    if got >= want then
      break
    end
    local members
    if rev then
      members = redis.call('ZRANGE', index, from, to, 'BYLEX', 'REV', 'LIMIT', 0, want - got)
    else
      members = redis.call('ZRANGE', index, from, to, 'BYLEX', 'LIMIT', 0, want - got)
    end
    if #members == 0 then
      break
    end
    for _, member in ipairs(members) do
      local id = string.match(member, '^[^.]+%.(.+)$')
      if id and redis.call('EXISTS', prefix .. id) == 1 then
        out[#out + 1] = member
        got = got + 1
      else
        redis.call('ZREM', index, member)
      end
    end
    from = '(' .. members[#members]
  end
  return got
end
