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

use redis::{Script, ScriptInvocation, ToRedisArgs, Value};

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

    /// Add an argument (as `ScriptInvocation::arg` would: a number as its digits),
    /// written straight into the call's arguments (not into a list of its own
    /// first, then moved: an allocation and a copy an argument, about 2,500
    /// instructions a concluding write).
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Call {
        arg.write_redis_args(&mut self.args);
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
    /// what every call has at a position (the batch's template) once, then
    /// each call's keys and arguments at the positions where calls differ.
    /// Each argument costs Redis about 1,100 instructions to parse and turn
    /// into Lua; a batch of creates shares about two thirds of them.
    pub(crate) fn batch<'a>(lua: &'a Lua, calls: &[&Call]) -> Invocation<'a> {
        let keys = Template::of(calls.iter().map(|c| c.keys.as_slice()));
        let args = Template::of(calls.iter().map(|c| c.args.as_slice()));
        let mixed = calls.iter().any(|c| c.keys.len() != keys.values.len() || c.args.len() != args.values.len());
        let mut inv = lua.prepare_invoke();
        inv.arg(calls.len()).arg(keys.values.len()).arg(args.values.len());
        inv.arg(keys.positions()).arg(args.positions()).arg(if mixed { "1" } else { "" });
        for key in &keys.values {
            inv.key(*key);
        }
        for arg in &args.values {
            inv.arg(arg.as_slice());
        }
        for call in calls {
            for &j in keys.differ.iter().take_while(|&&j| j < call.keys.len()) {
                inv.key(&call.keys[j]);
            }
            if mixed {
                inv.arg(call.keys.len()).arg(call.args.len());
            }
            for &j in args.differ.iter().take_while(|&&j| j < call.args.len()) {
                inv.arg(call.args[j].as_slice());
            }
        }
        inv
    }
}

/// A `batch.lua` reply (flat: each call's table reply as its length and
/// its elements, any other reply as -1 and itself) as one reply per call,
/// each as its script alone would have answered it; `None` when it is not
/// `calls` replies in that form.
pub(crate) fn batch_replies(flat: Vec<Value>, calls: usize) -> Option<Vec<Value>> {
    let mut flat = flat.into_iter();
    let mut replies = Vec::with_capacity(calls);
    while let Some(head) = flat.next() {
        let reply = match head {
            Value::Int(-1) => flat.next()?,
            Value::Int(m) => {
                let m = usize::try_from(m).ok()?;
                let parts: Vec<Value> = flat.by_ref().take(m).collect();
                if parts.len() != m {
                    return None;
                }
                Value::Array(parts)
            }
            _ => return None,
        };
        replies.push(reply);
    }
    (replies.len() == calls).then_some(replies)
}

/// The template of a batch's keys (or arguments): at each position, what
/// the first call with that position has there, and the positions (from 0,
/// ascending) where some call has something else or nothing.
struct Template<'c, T> {
    values: Vec<&'c T>,
    differ: Vec<usize>,
}

impl<'c, T: PartialEq> Template<'c, T> {
    fn of(lists: impl Iterator<Item = &'c [T]> + Clone) -> Template<'c, T> {
        let mut values: Vec<&T> = Vec::new();
        for list in lists.clone() {
            values.extend(list.iter().skip(values.len()));
        }
        let differ = (0..values.len()).filter(|&j| lists.clone().any(|list| list.get(j) != Some(values[j]))).collect();
        Template { values, differ }
    }

    /// The differing positions as `batch.lua` reads them: "<position>,…", from 1.
    fn positions(&self) -> String {
        self.differ.iter().map(|j| (j + 1).to_string()).collect::<Vec<_>>().join(",")
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

#[cfg(test)]
mod tests {
    use presa_testkit::redis::TestRedis;

    use super::*;

    fn call(keys: &[&str], args: &[&[u8]]) -> Call {
        let mut c = Call::default();
        for k in keys {
            c.key(*k);
        }
        for a in args {
            c.arg(*a);
        }
        c
    }

    #[test]
    fn batch_replies_unflatten_tables_and_other_replies() {
        let flat = vec![
            Value::Int(2),
            Value::Int(1),
            Value::BulkString(b"q".to_vec()),
            Value::Int(-1),
            Value::Int(-1),
            Value::Int(-1),
            Value::Nil,
            Value::Int(0),
            Value::Int(-1),
            Value::BulkString(b"1-0".to_vec()),
        ];
        let replies = batch_replies(flat.clone(), 5).unwrap();
        assert_eq!(
            replies,
            [
                Value::Array(vec![Value::Int(1), Value::BulkString(b"q".to_vec())]),
                Value::Int(-1),
                Value::Nil,
                Value::Array(vec![]),
                Value::BulkString(b"1-0".to_vec()),
            ]
        );
        assert_eq!(batch_replies(flat.clone(), 4), None, "five replies, not four");
        assert_eq!(batch_replies(flat[..9].to_vec(), 5), None, "the last reply is missing");
        assert_eq!(batch_replies(vec![Value::Int(3), Value::Int(1)], 1), None, "a table cut short");
        assert_eq!(batch_replies(vec![Value::Nil], 1), None, "no length");
    }

    #[test]
    fn a_template_holds_each_position_once_and_lists_where_calls_differ() {
        let calls = [call(&["t1", "s", "a"], &[b"1", b"x"]), call(&["t2", "s", "a", "i"], &[b"1", b"y"])];
        let keys = Template::of(calls.iter().map(|c| c.keys.as_slice()));
        assert_eq!(keys.values, ["t1", "s", "a", "i"]);
        assert_eq!(keys.differ, [0, 3], "the first call has no fourth key");
        assert_eq!(keys.positions(), "1,4");
        let args = Template::of(calls.iter().map(|c| c.args.as_slice()));
        let want = [b"1".to_vec(), b"x".to_vec()];
        assert_eq!(args.values, want.iter().collect::<Vec<_>>());
        assert_eq!(args.positions(), "2");
    }

    /// Every call of a batch gets exactly the keys and arguments it was
    /// made with, whether the calls have the same counts or not, with
    /// arguments that look like the layout's own (digits, commas, empty,
    /// binary).
    #[tokio::test]
    async fn each_call_of_a_batch_gets_its_own_keys_and_arguments() {
        let redis = TestRedis::start().await;
        let client = redis::Client::open(redis.url()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let echo = composed(
            "echo_batch",
            &[
                GROUP.to_owned(),
                function("each", "return { table.concat(KEYS, '|'), table.concat(ARGV, '|'), #KEYS, #ARGV }"),
                lua!("batch.lua").to_owned(),
            ],
        );
        let same = [
            call(&["{b}:t1", "{b}:s", "{b}:a"], &[b"1", b"x", b""]),
            call(&["{b}:t2", "{b}:s", "{b}:a"], &[b"1", b"y", b""]),
            call(&["{b}:t1", "{b}:s", "{b}:a"], &[b"1", b"x", b"2,3"]),
        ];
        let mixed = [
            call(&["{b}:t1", "{b}:s"], &[b"1", b"\x00\xff,"]),
            call(&["{b}:t2", "{b}:s", "{b}:k"], &[b"1", b"y", b"z"]),
            call(&[], &[]),
            call(&["{b}:t3", "{b}:s"], &[b"", b"\x00\xff,"]),
        ];
        for batch in [&same[..], &mixed[..], &same[..1]] {
            let calls: Vec<&Call> = batch.iter().collect();
            let inv = Call::batch(&echo, &calls);
            let flat: Vec<Value> = inv.invoke_async(&mut con).await.unwrap();
            let replies: Vec<(Vec<u8>, Vec<u8>, usize, usize)> = batch_replies(flat, batch.len())
                .unwrap()
                .into_iter()
                .map(|r| redis::from_redis_value(r).unwrap())
                .collect();
            assert_eq!(replies.len(), batch.len());
            for (c, (keys, args, nk, na)) in batch.iter().zip(replies) {
                assert_eq!(String::from_utf8(keys).unwrap(), c.keys.join("|"));
                assert_eq!(args, c.args.join(&b'|'));
                assert_eq!((nk, na), (c.keys.len(), c.args.len()));
            }
        }
    }
}
