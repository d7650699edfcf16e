//! The Lua scripts (in `lua/`), embedded at compile time and run through
//! [`redis::Script`] (EVALSHA, loading the script on NOSCRIPT). Each file opens
//! with its contract: KEYS, ARGV and the reply. Every key a script touches is
//! passed in KEYS and shares one hash slot, except `read.lua`,
//! `recover.lua` and `claim_batch.lua` over several partitions, and
//! `create_scoped.lua`, `transition.lua` and `conclude_dead.lua` over a task's and its
//! scope's keys (standalone only). Scripts that read or write a task have `task.lua`
//! (the record layout's functions) in front of them, and those that count a
//! scope's bytes `bytes.lua`.

use std::{
    ops::{Deref, DerefMut},
    sync::LazyLock,
};

use redis::{Script, ScriptInvocation};

use crate::conn::Verbosity;

/// A script with the name its spans carry (`redis EVALSHA <name>`).
pub(crate) struct Lua {
    pub(crate) name: &'static str,
    /// Polls that run all the time on idle workers trace at debug level.
    pub(crate) verbosity: Verbosity,
    script: Script,
}

impl Lua {
    /// Start an invocation (add keys and args, then `RedisStore::invoke` it).
    pub(crate) fn prepare_invoke(&self) -> Invocation<'_> {
        Invocation { lua: self, inner: self.script.prepare_invoke() }
    }
}

/// An invocation of a [`Lua`] script: a [`ScriptInvocation`] that knows its script.
pub(crate) struct Invocation<'a> {
    pub(crate) lua: &'a Lua,
    inner: ScriptInvocation<'a>,
}

impl<'a> Deref for Invocation<'a> {
    type Target = ScriptInvocation<'a>;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl DerefMut for Invocation<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

/// `task.lua`: the functions that load and store a task record, put in
/// front of every script that touches one.
const TASK: &str = include_str!("../lua/task.lua");
/// `stream.lua`: the helpers of the scripts that read work streams (entry
/// fields, XINFO records, held consumers), put in front of each of them.
const STREAM: &str = include_str!("../lua/stream.lua");
/// [`TASK`] and [`STREAM`], for a script that reads both tasks and streams.
const TASK_STREAM: &str = concat!(include_str!("../lua/task.lua"), include_str!("../lua/stream.lua"));
/// `bytes.lua`: a scope's byte reservations (reserve, resize, sweep, expire),
/// put in front of every script that counts a task's bytes.
const BYTES: &str = include_str!("../lua/bytes.lua");
/// [`TASK`] and [`BYTES`], for a script that writes a task and counts its bytes.
const TASK_BYTES: &str = concat!(include_str!("../lua/task.lua"), include_str!("../lua/bytes.lua"));
/// [`TASK`] and `idempotency.lua` (a keyed create's record: look up, write),
/// for the scripts that create tasks.
const TASK_IDEMPOTENCY: &str = concat!(include_str!("../lua/task.lua"), include_str!("../lua/idempotency.lua"));

/// `body` (a script's) as the Lua function `name` of its own KEYS and ARGV,
/// for a script that runs others' logic as one step.
fn function(name: &str, body: &str) -> String {
    format!("local function {name}(KEYS, ARGV)\n{body}\nend\n")
}

/// `script!(NAME, "file.lua", [Debug,] "doc")`: the script in `lua/file.lua`.
macro_rules! script {
    (@ $prelude:expr, $name:ident, $file:literal, $verbosity:ident, $doc:literal) => {
        #[doc = $doc]
        pub(crate) static $name: LazyLock<Lua> = LazyLock::new(|| Lua {
            name: $file.trim_end_matches(".lua"),
            verbosity: Verbosity::$verbosity,
            script: Script::new(&[$prelude, include_str!(concat!("../lua/", $file))].concat()),
        });
    };
    ($name:ident, $file:literal, $doc:literal) => {
        script!(@ "", $name, $file, Info, $doc);
    };
    ($name:ident, $file:literal, $verbosity:ident, $doc:literal) => {
        script!(@ "", $name, $file, $verbosity, $doc);
    };
}

/// As `script!`, for a script that reads or writes tasks: [`TASK`] in front of it.
macro_rules! task_script {
    ($name:ident, $file:literal, $doc:literal) => {
        script!(@ TASK, $name, $file, Info, $doc);
    };
    ($name:ident, $file:literal, $verbosity:ident, $doc:literal) => {
        script!(@ TASK, $name, $file, $verbosity, $doc);
    };
}

script!(@ TASK_IDEMPOTENCY, CREATE, "create.lua", Info, "Create a task and XADD its work entry, unless the task (or its idempotency key) exists.");
script!(@ TASK_IDEMPOTENCY, REPLAY, "replay.lua", Info, "A keyed create's first step on a cluster: the task its idempotency key made, if any.");
script!(@ TASK_BYTES, TRANSITION, "transition.lua", Info, "Compare-and-set a task (rev, fence, not terminal), publish it, count its bytes.");
task_script!(CLAIM, "claim.lua", "Bump a delivered task's attempt (CAS on rev), or drop its entry.");
task_script!(
    CLAIM_BATCH,
    "claim_batch.lua",
    "claim.lua for a batch of entries (standalone: any partitions; cluster: one)."
);
task_script!(RENEW, "renew.lua", "Reset a held entry's idle time if the attempt still matches.");
task_script!(RELEASE, "release.lua", "Make a held entry recoverable at once if the attempt still matches.");
task_script!(REMOVE_WORK, "remove_work.lua", "XACK and XDEL finished work, unless a newer attempt holds it.");
script!(ACK, "ack.lua", "XACK and XDEL a work entry together.");
script!(@ TASK_STREAM, READ, "read.lua", Debug, "Read up to N new entries over the partitions (standalone only).");
script!(@ STREAM, RECOVER, "recover.lua", Debug, "XAUTOCLAIM up to N lapsed entries over the partitions (standalone only).");
script!(@ STREAM, UNHOLD, "unhold.lua", Debug, "Hand held entries of scopes with room to a worker (standalone: any partitions).");
script!(ADMIT, "admit.lua", "Add a task to its scope's active set unless the set is at the limit.");
script!(@ BYTES, QUOTA, "quota.lua", Info, "Reserve a new task's bytes under its scope's byte quota unless it would be exceeded.");
script!(@ BYTES, RESIZE, "resize.lua", Info, "Count a task at its new size under its scope's byte quota (cluster), refusing growth past it.");
/// `create_scoped.lua` behind [`TASK`], [`BYTES`], `idempotency.lua` and the bodies of `admit.lua`,
/// `quota.lua` and `create.lua`, each as a local function of its own KEYS
/// and ARGV.
pub(crate) static CREATE_SCOPED: LazyLock<Lua> = LazyLock::new(|| {
    composed(
        "create_scoped",
        &[
            TASK_BYTES.to_owned(),
            include_str!("../lua/idempotency.lua").to_owned(),
            function("admit", include_str!("../lua/admit.lua")),
            function("quota", include_str!("../lua/quota.lua")),
            function("create", include_str!("../lua/create.lua")),
            include_str!("../lua/create_scoped.lua").to_owned(),
        ],
    )
});
/// `conclude_dead.lua` behind [`TASK`], [`BYTES`] and the body of `transition.lua` as
/// the local function `transition` of its own KEYS and ARGV.
pub(crate) static CONCLUDE_DEAD: LazyLock<Lua> = LazyLock::new(|| {
    composed(
        "conclude_dead",
        &[
            TASK_BYTES.to_owned(),
            function("transition", include_str!("../lua/transition.lua")),
            include_str!("../lua/conclude_dead.lua").to_owned(),
        ],
    )
});

/// A script made of `parts` (preludes and scripts wrapped as functions), in order.
fn composed(name: &'static str, parts: &[String]) -> Lua {
    Lua { name, verbosity: Verbosity::Info, script: Script::new(&parts.concat()) }
}
script!(
    DEAD_LETTERS,
    "dead_letters.lua",
    "One partition's page of a tenant's (or a scope's) dead letters, dropping expired members."
);
script!(
    MARK_DEAD_LETTER_REPLAYED,
    "mark_dead_letter_replayed.lua",
    "Mark a tenant's dead letter replayed as a task, unless marked before."
);
script!(DISCARD_DEAD_LETTER, "discard_dead_letter.lua", "Remove a tenant's dead letter and its index members.");
script!(
    WRITE_SESSION,
    "write_session.lua",
    "One counted, capped write to a legacy session's state; registers a new session."
);
script!(SESSION_ADMIT, "session_admit.lua", "Count a legacy session holding state store-wide, within the limit.");
script!(@ STREAM, WORK_STATS, "work_stats.lua", Debug, "Count a partition's queued and pending work, and the oldest pending age.");
script!(
    LIST_TASKS,
    "list_tasks.lua",
    "One partition's next cursors of an admin task listing, newest first, dropping expired members."
);
script!(
    HEARTBEAT,
    "heartbeat.lua",
    Debug,
    "Record a process's heartbeat, forget silent ones, answer whether it drains."
);
script!(NODES, "nodes.lua", "Every live process's last heartbeat and the drained ids.");
script!(DRAIN, "drain.lua", "Ask a live process to drain.");
