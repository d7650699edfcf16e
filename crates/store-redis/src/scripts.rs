//! The Lua scripts (in `lua/`), embedded at compile time and run through
//! [`redis::Script`] (EVALSHA, loading the script on NOSCRIPT). Each file opens
//! with its contract: KEYS, ARGV and the reply. Every key a script touches is
//! passed in KEYS and shares one hash slot.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal, $doc:literal) => {
        #[doc = $doc]
        pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("../lua/", $file))));
    };
}

script!(CREATE, "create.lua", "Create a task hash and XADD its work entry, unless the hash exists.");
script!(TRANSITION, "transition.lua", "Compare-and-set a task (rev, fence, not terminal) and publish it.");
script!(CLAIM, "claim.lua", "Bump a delivered task's attempt (CAS on rev), or drop its entry.");
script!(RENEW, "renew.lua", "Reset a held entry's idle time if the attempt still matches.");
script!(RELEASE, "release.lua", "Make a held entry recoverable at once if the attempt still matches.");
script!(FINISH, "finish.lua", "XACK and XDEL finished work, unless a newer attempt holds it.");
script!(ACK, "ack.lua", "XACK and XDEL a work entry together.");
script!(READ, "read.lua", "Read up to N new entries over the partitions (standalone only).");
script!(RECOVER, "recover.lua", "XAUTOCLAIM up to N lapsed entries over the partitions (standalone only).");
script!(ADMIT, "admit.lua", "Add a task to its scope's active set unless the set is at the limit.");
