//! How the Lua scripts (in `lua/`) are embedded at compile time and run
//! through [`redis::Script`] (EVALSHA, loading the script on NOSCRIPT): the
//! [`Lua`] type, the preludes put in front of scripts, and the `script!`
//! macro each part declares its own scripts with (`records/mod.rs`,
//! `work/mod.rs`, `dead.rs`, `session.rs`, `admin.rs`, `nodes.rs`), each
//! named as its operation. Each file opens with its contract: KEYS, ARGV and
//! the reply. Every key a script touches is
//! passed in KEYS and shares one hash slot, except `read.lua`,
//! `recover.lua` and `claim_batch.lua` over several partitions, and
//! `create_scoped.lua`, `transition.lua` and `conclude_dead.lua` over a task's and its
//! scope's keys (standalone only), and `batch.lua` over a batch's calls (each
//! call's keys as its script alone takes them). Scripts that read or write a task have `task.lua`
//! (the record layout's functions) in front of them, those that count a
//! scope's bytes `bytes.lua`, and those whose calls a batch shares keys
//! between `group.lua`.

use std::ops::{Deref, DerefMut};

use redis::{Script, ScriptInvocation, ToRedisArgs};

use crate::conn::Verbosity;

/// A script with the name its spans carry (`redis EVALSHA <name>`).
pub(crate) struct Lua {
    pub(crate) name: &'static str,
    /// Polls that run all the time on idle workers trace at debug level.
    pub(crate) verbosity: Verbosity,
    script: Script,
}

impl Lua {
    /// The script made of `source`, named `name` in spans.
    pub(crate) fn new(name: &'static str, verbosity: Verbosity, source: &str) -> Lua {
        Lua { name, verbosity, script: Script::new(source) }
    }

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

/// One call's keys and arguments, owned (an [`Invocation`] borrows its
/// script): run alone ([`add_to`](Call::add_to) an invocation), or waiting
/// in a batch (`batch.rs`) whose `batch.lua` runs many ([`Call::batch`]).
#[derive(Debug, Default)]
pub(crate) struct Call {
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

impl Call {
    /// Add a key.
    pub(crate) fn key(&mut self, key: impl Into<String>) -> &mut Call {
        self.keys.push(key.into());
        self
    }

    /// Add an argument (as `ScriptInvocation::arg` would: a number as its digits).
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Call {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// Add this call's keys and arguments to `inv`, after what it has.
    pub(crate) fn add_to(&self, inv: &mut Invocation<'_>) {
        for key in &self.keys {
            inv.key(key);
        }
        for arg in &self.args {
            inv.arg(arg.as_slice());
        }
    }

    /// `calls` as one invocation of `lua`, a `batch.lua` (see its header):
    /// every call's keys in turn, and each call's key and argument counts
    /// in front of its arguments.
    pub(crate) fn batch<'a>(lua: &'a Lua, calls: &[&Call]) -> Invocation<'a> {
        let mut inv = lua.prepare_invoke();
        for call in calls {
            for key in &call.keys {
                inv.key(key);
            }
            inv.arg(call.keys.len()).arg(call.args.len());
            for arg in &call.args {
                inv.arg(arg.as_slice());
            }
        }
        inv
    }
}

/// The text of `lua/<file>`, embedded at compile time (from any module).
macro_rules! lua {
    ($file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/", $file))
    };
}
pub(crate) use lua;

/// `task.lua`: the functions that load and store a task record, put in
/// front of every script that touches one.
pub(crate) const TASK: &str = lua!("task.lua");
/// `stream.lua`: the helpers of the scripts that read work streams (entry
/// fields, XINFO records, held consumers), put in front of each of them.
pub(crate) const STREAM: &str = lua!("stream.lua");
/// [`TASK`] and [`STREAM`], for a script that reads both tasks and streams.
pub(crate) const TASK_STREAM: &str = concat!(lua!("task.lua"), lua!("stream.lua"));
/// `group.lua`: what the calls of one script (a batch's, `batch.lua`) share:
/// reads it knows already, writes held to the batch's end. Put in front of
/// every script that runs `create.lua`, `admit.lua`, `bytes.lua` or
/// `transition.lua` (in the constants below).
pub(crate) const GROUP: &str = lua!("group.lua");
/// `bytes.lua`: a scope's byte reservations (reserve, resize, sweep, expire),
/// behind [`GROUP`], put in front of every script that counts a task's bytes.
pub(crate) const BYTES: &str = concat!(lua!("group.lua"), lua!("bytes.lua"));
/// [`GROUP`], [`TASK`] and `bytes.lua`, for a script that writes a task and counts its bytes.
pub(crate) const TASK_BYTES: &str = concat!(lua!("group.lua"), lua!("task.lua"), lua!("bytes.lua"));
/// [`GROUP`], [`TASK`] and `idempotency.lua` (a keyed create's record: look
/// up, write), for the scripts that create tasks.
pub(crate) const TASK_IDEMPOTENCY: &str = concat!(lua!("group.lua"), lua!("task.lua"), lua!("idempotency.lua"));

/// `body` (a script's) as the Lua function `name` of its own KEYS and ARGV,
/// for a script that runs others' logic as one step.
pub(crate) fn function(name: &str, body: &str) -> String {
    format!("local function {name}(KEYS, ARGV)\n{body}\nend\n")
}

/// A script made of `parts` (preludes and scripts wrapped as functions), in order.
pub(crate) fn composed(name: &'static str, parts: &[String]) -> Lua {
    Lua::new(name, Verbosity::Info, &parts.concat())
}

/// `script!(vis NAME, "file.lua", [Debug,] "doc")`: the script in
/// `lua/file.lua`; `script!(@ PRELUDE, vis NAME, …)` with a prelude in front.
macro_rules! script {
    (@ $prelude:expr, $vis:vis $name:ident, $file:literal, $verbosity:ident, $doc:literal) => {
        #[doc = $doc]
        $vis static $name: ::std::sync::LazyLock<$crate::scripts::Lua> = ::std::sync::LazyLock::new(|| {
            $crate::scripts::Lua::new(
                $file.trim_end_matches(".lua"),
                $crate::conn::Verbosity::$verbosity,
                &[$prelude, $crate::scripts::lua!($file)].concat(),
            )
        });
    };
    ($vis:vis $name:ident, $file:literal, $doc:literal) => {
        $crate::scripts::script!(@ "", $vis $name, $file, Info, $doc);
    };
    ($vis:vis $name:ident, $file:literal, $verbosity:ident, $doc:literal) => {
        $crate::scripts::script!(@ "", $vis $name, $file, $verbosity, $doc);
    };
}
pub(crate) use script;

/// As `script!`, for a script that reads or writes tasks: `task.lua` in front of it.
macro_rules! task_script {
    ($vis:vis $name:ident, $file:literal, $doc:literal) => {
        $crate::scripts::script!(@ $crate::scripts::TASK, $vis $name, $file, Info, $doc);
    };
}
pub(crate) use task_script;
