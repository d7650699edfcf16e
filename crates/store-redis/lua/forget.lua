-- forget.lua: on a cluster, a task no longer counts against its scope's
-- active-task limit (its write that ended it landed, or its create did
-- not happen; see `records/limits.rs`). Standalone Redis does this inside
-- transition.lua and create_scoped.lua. A set left with admit.lua's pad
-- alone is deleted (group.lua's active_remove).
--
-- KEYS[1]: scope set {prefix}:{s.<tenant>.<subject>}:active (see admit.lua)
-- ARGV[1]: task id
-- Returns: 1.

active_remove(KEYS[1], ARGV[1])
return 1
