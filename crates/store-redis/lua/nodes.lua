-- nodes.lua: every live process's last heartbeat, and which were asked to
-- drain, in one read (every registry key shares the {nodes} slot).
--
-- KEYS[1]: every node {prefix}:{nodes}:all (see heartbeat.lua)
-- KEYS[2]: the drains {prefix}:{nodes}:drain
-- ARGV[1]: the node key prefix {prefix}:{nodes}:node:
-- ARGV[2]: now, Unix ms
-- Returns: {heartbeat JSONs, drained ids}: two lists.

local beats, drained = {}, {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], '(' .. ARGV[2], '+inf', 'BYSCORE')) do
  local beat = redis.call('GET', ARGV[1] .. id)
  if beat then
    beats[#beats + 1] = beat
  end
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], '(' .. ARGV[2], '+inf', 'BYSCORE')) do
  drained[#drained + 1] = id
end
return { beats, drained }
