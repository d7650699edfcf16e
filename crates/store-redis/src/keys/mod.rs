//! Every Redis key and channel name presa uses, built in one place.
//!
//! All keys of one task share its partition's hash tag (`{pNN}`), so every
//! Lua script touches exactly one Redis Cluster slot: the task record, its
//! events channel and the partition's work stream live together.
//!
//! Keys are built on every store call (a claim read names every partition's
//! stream), so the per-partition part, `{prefix}:{pNN}:`, is spelt once per
//! [`Keys`] and a key is one allocation and a copy or two, not a `format!`.

use std::sync::Arc;

use presa_tasks::{Scope, TaskId};

/// The consumer group every worker reads the partition streams with.
pub const GROUP: &str = "workers";

/// The consumer (of [`GROUP`], in every partition stream) that owns the work
/// of `scope` that a claimer had no room for (see `unhold.lua`):
/// `held:<16 hex digits>`, a stable 64-bit FNV-1a hash of the scope, the same
/// in every process. Two scopes sharing a hash share a waiting room (their
/// work stays queued all the same), so no stronger hash is needed.
pub fn held_consumer(scope: &Scope) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in scope.tenant.bytes().chain([0]).chain(scope.subject.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("held:{hash:016x}")
}

/// Builds key names under one prefix for a fixed number of partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
    partitions: u16,
    /// `{prefix}:{pNN}:` of each partition, by partition (shared by clones).
    tagged: Arc<[Box<str>]>,
}

impl Keys {
    /// Keys under `prefix` (no braces allowed) for `partitions` partitions.
    pub fn new(prefix: impl Into<String>, partitions: u16) -> Self {
        let prefix = prefix.into();
        let tagged = (0..partitions).map(|p| format!("{prefix}:{}:", Self::tag(p)).into_boxed_str()).collect();
        Keys { prefix, partitions, tagged }
    }

    /// `{prefix}:{pNN}:` followed by `parts`, in one allocation of the
    /// right size (`format!` past the partitions: a key of a partition
    /// this store does not have, which the scripts then find empty).
    fn in_partition(&self, partition: u16, parts: &[&str]) -> String {
        let Some(tagged) = self.tagged.get(usize::from(partition)) else {
            return format!("{}:{}:{}", self.prefix, Self::tag(partition), parts.concat());
        };
        let mut key = String::with_capacity(tagged.len() + parts.iter().map(|p| p.len()).sum::<usize>());
        key.push_str(tagged);
        parts.iter().for_each(|p| key.push_str(p));
        key
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How many partitions (and so work streams) there are.
    pub fn partitions(&self) -> u16 {
        self.partitions
    }

    /// The partition of `id`, if it is a well-formed id of a partition that
    /// exists here. Anything else names no task.
    pub fn partition_of(&self, id: &TaskId) -> Option<u16> {
        id.partition().filter(|p| *p < self.partitions)
    }

    /// The hash tag of a partition: `{pNN}` (same spelling as the id's prefix).
    fn tag(partition: u16) -> PartitionTag {
        PartitionTag(partition)
    }

    /// `{prefix}:{pNN}:task:<id>` — hash: the task record (see
    /// [`crate::record`]), expiring at `createdAt + ttlMs`.
    pub fn task(&self, id: &TaskId) -> Option<String> {
        let p = self.partition_of(id)?;
        Some(self.in_partition(p, &["task:", id.as_str()]))
    }

    /// `{prefix}:{pNN}:task:` — what precedes the id in the key of a task of
    /// `partition` (`read.lua` reads delivered entries' docs with it).
    pub fn task_prefix(&self, partition: u16) -> String {
        self.in_partition(partition, &["task:"])
    }

    /// `{prefix}:{pNN}:events:<id>` — pub/sub channel: the task's committed
    /// snapshots (JSON), published by `transition.lua`.
    pub fn events(&self, id: &TaskId) -> Option<String> {
        let p = self.partition_of(id)?;
        Some(self.in_partition(p, &["events:", id.as_str()]))
    }

    /// `{prefix}:{pNN}:claimed` — pub/sub channel: `"<task id>\n<doc>"` for
    /// every write to a claimed task (attempt > 0) that its holder did not
    /// make: a client's (an answer, a cancel) and a later claim's. Workers
    /// watch the tasks they run through it (`claimed.rs`), one channel per
    /// partition for the worker's life instead of one per task.
    pub fn claimed(&self, partition: u16) -> String {
        self.in_partition(partition, &["claimed"])
    }

    /// `{prefix}:{pNN}:idem:<digest>` — string: a keyed create's record
    /// (`lua/idempotency.lua`), in the slot of the partition the key names.
    pub fn idempotency(&self, partition: u16, key: &presa_store::Idempotency) -> String {
        self.in_partition(partition, &["idem:", &key.id])
    }

    /// `{prefix}:{pNN}:work` — stream: one entry (`task` = id) per task with
    /// work to run, read by the consumer group [`GROUP`].
    pub fn work(&self, partition: u16) -> String {
        self.in_partition(partition, &["work"])
    }

    /// `{prefix}:{pNN}:recovery` — string: the entry id where the next sweep
    /// for lapsed leases on [`work`](Self::work)'s pending list starts
    /// (`lua/recover.lua`; missing: from the head), shared by every worker so
    /// a pass goes on where the last one stopped.
    pub fn recovery(&self, partition: u16) -> String {
        self.in_partition(partition, &["recovery"])
    }

    /// `{prefix}:{pNN}:delayed` — sorted set: the partition's work put off
    /// until a time (member: task id, score: when it is due, Unix ms), moved
    /// back to [`work`](Self::work) when due (`lua/defer.lua`, `lua/promote.lua`).
    pub fn delayed(&self, partition: u16) -> String {
        self.in_partition(partition, &["delayed"])
    }

    /// `{prefix}:{pNN}:sync` — string, expiring 10 s after its last write:
    /// replicated durability's barrier. Written with a `WAIT` behind it to
    /// confirm that what the partition holds (a replayed create) reached the
    /// replicas (`durability.rs`).
    pub fn sync(&self, partition: u16) -> String {
        self.in_partition(partition, &["sync"])
    }

    /// `{prefix}:{pNN}:wake` — sharded pub/sub channel (cluster mode only): a
    /// ping when work is enqueued or released on the partition, so claimers
    /// that cannot block on every stream at once wake up.
    pub fn wake(&self, partition: u16) -> String {
        self.in_partition(partition, &["wake"])
    }

    /// Every partition's work stream, in partition order.
    pub fn all_work(&self) -> Vec<String> {
        (0..self.partitions).map(|p| self.work(p)).collect()
    }

    /// `{prefix}:{pNN}:dead:<id>` — string: the dead letter of a poison task
    /// (`"<hex tenant> <replayed as, or ->\n<letter JSON>"`, see `lua/conclude_dead.lua`),
    /// in its task's slot, expiring at its death plus the retention.
    pub fn dead_letter(&self, id: &TaskId) -> Option<String> {
        let p = self.partition_of(id)?;
        Some(self.in_partition(p, &["dead:", id.as_str()]))
    }

    /// `{prefix}:{pNN}:dead:` — what precedes the id in the key of a dead
    /// letter of `partition` (`dead_letters.lua` reads listed letters with it).
    pub fn dead_letter_prefix(&self, partition: u16) -> String {
        self.in_partition(partition, &["dead:"])
    }

    /// `{prefix}:{pNN}:dead_t:<hex tenant>` — sorted set: the tenant's dead
    /// letters in `partition` (all scored 0, member = the letter's cursor
    /// `<died at, 20 digits>.<id>`, so they sort by time of death), expiring
    /// with its last letter.
    pub fn dead_by_tenant(&self, partition: u16, tenant: &str) -> String {
        self.in_partition(partition, &["dead_t:", &hex(tenant.as_bytes())])
    }

    /// `{prefix}:{pNN}:dead_s:<hex tenant>.<hex subject>` — sorted set: as
    /// [`Keys::dead_by_tenant`], the letters of one scope.
    pub fn dead_by_scope(&self, partition: u16, scope: &Scope) -> String {
        let (tenant, subject) = (hex(scope.tenant.as_bytes()), hex(scope.subject.as_bytes()));
        self.in_partition(partition, &["dead_s:", &tenant, ".", &subject])
    }

    /// A tenant as dead letters name it in their header: hex, so that any
    /// tenant is one word (`lua/conclude_dead.lua`).
    pub fn tenant_word(tenant: &str) -> String {
        hex(tenant.as_bytes())
    }

    /// The tenant a [`Keys::tenant_word`] names; `None` for anything else.
    pub fn tenant_of_word(word: &str) -> Option<String> {
        if !word.len().is_multiple_of(2) {
            return None;
        }
        let bytes: Option<Vec<u8>> =
            (0..word.len()).step_by(2).map(|i| u8::from_str_radix(word.get(i..i + 2)?, 16).ok()).collect();
        String::from_utf8(bytes?).ok()
    }

    /// `{prefix}:{pNN}:ix:<hex tenant>` — stream: the tenant's tasks in
    /// `partition` for the admin listing, one entry (`t` = task id) per
    /// create, in the order Redis took them; written by `create.lua`,
    /// expiring a little after the last task it names
    /// (a tenth of its lifetime, a minute at most).
    pub fn task_index(&self, partition: u16, tenant: &str) -> String {
        self.in_partition(partition, &["ix:", &hex(tenant.as_bytes())])
    }

    /// `{prefix}:{pNN}:ix:` — what precedes the hex tenant in a task index
    /// of `partition` (`list_tasks.lua` reads every tenant's with it).
    pub fn task_index_prefix(&self, partition: u16) -> String {
        self.in_partition(partition, &["ix:"])
    }

    /// `{prefix}:{pNN}:ixt` — sorted set: the tenants with a task index in
    /// `partition` (hex tenant, scored with the index's expiry or `+inf`).
    pub fn task_tenants(&self, partition: u16) -> String {
        self.in_partition(partition, &["ixt"])
    }

    /// `{prefix}:{nodes}:node:<id>` — string: a live process's last
    /// heartbeat (JSON), expiring with it. Every registry key shares the
    /// `{nodes}` slot.
    pub fn node(&self, id: &str) -> String {
        format!("{}{id}", self.node_prefix())
    }

    /// `{prefix}:{nodes}:node:` — what precedes a node's id in its key.
    pub fn node_prefix(&self) -> String {
        format!("{}:{{nodes}}:node:", self.prefix)
    }

    /// `{prefix}:{nodes}:all` — sorted set: every node id, scored with when
    /// its heartbeat runs out (Unix ms).
    pub fn nodes(&self) -> String {
        format!("{}:{{nodes}}:all", self.prefix)
    }

    /// `{prefix}:{nodes}:drain` — sorted set: the nodes asked to drain,
    /// scored as in [`Keys::nodes`].
    pub fn drains(&self) -> String {
        format!("{}:{{nodes}}:drain", self.prefix)
    }

    /// `{prefix}:{s.<hex tenant>.<hex subject>}:active` — sorted set: the
    /// scope's admitted, not yet terminal tasks (member = task id, score =
    /// the task's expiry, Unix ms, or `+inf`). Only maintained when creates carry
    /// `max_active_per_scope`.
    pub fn scope_active(&self, scope: &Scope) -> String {
        self.of_scope(scope, &["active"])
    }

    /// `{prefix}:{s.<hex tenant>.<hex subject>}:` followed by `parts`: a
    /// key in the scope's slot, in one allocation of the right size.
    fn of_scope(&self, scope: &Scope, parts: &[&str]) -> String {
        let len = self.prefix.len() + 2 + scope_tag_len(scope) + parts.iter().map(|p| p.len()).sum::<usize>();
        let mut key = String::with_capacity(len);
        key.push_str(&self.prefix);
        key.push(':');
        push_scope_tag(&mut key, scope);
        key.push(':');
        parts.iter().for_each(|p| key.push_str(p));
        key
    }

    /// `{prefix}:{s.<hex tenant>.<hex subject>}:bytes_q` — hash: the
    /// scope's counted bytes by expiry bucket (field = the bucket's end,
    /// Unix ms, or `inf`) and their sum (field `total`), for the byte quota.
    /// Only maintained when creates carry `max_bytes_per_scope`;
    /// `lua/bytes.lua` has the layout.
    pub fn scope_bytes_buckets(&self, scope: &Scope) -> String {
        self.of_scope(scope, &["bytes_q"])
    }

    /// `{prefix}:ready` — string: written (with a short expiry) by readiness
    /// probes, to learn whether Redis accepts writes (not at `maxmemory`).
    pub fn ready_probe(&self) -> String {
        format!("{}:ready", self.prefix)
    }

    /// `{prefix}:epoch` — string: a random value written once by the first
    /// pod to find it missing; a pod that saw another value (or none where
    /// it saw one) knows Redis lost its data ([`crate::RedisStore::check_epoch`]).
    /// The one key that never expires (a few bytes).
    pub fn epoch(&self) -> String {
        format!("{}:epoch", self.prefix)
    }

    /// `{prefix}:{s.<hex tenant>.<hex subject>}:session:<hex id>` — hash:
    /// the shared state of `owner`'s legacy (2025-11-25) session (log level,
    /// subscriptions, ended) and its size in bytes (field `#bytes`),
    /// expiring with it. In its owner's slot, beside
    /// [`Keys::scope_sessions`]. The id is hex-encoded, so any session id is
    /// a safe key part.
    pub fn session(&self, owner: &Scope, session: &str) -> String {
        self.of_scope(owner, &["session:", &Self::session_member(session)])
    }

    /// A session's member in [`Keys::scope_sessions`]: its hex-encoded id.
    pub fn session_member(session: &str) -> String {
        hex(session.as_bytes())
    }

    /// `{prefix}:{s.<hex tenant>.<hex subject>}:sessions` — sorted set: the
    /// scope's legacy sessions holding state (member: the hex id, score:
    /// the session's expiry, Unix ms), for `max_legacy_sessions_per_scope`.
    pub fn scope_sessions(&self, owner: &Scope) -> String {
        self.of_scope(owner, &["sessions"])
    }

    /// `{prefix}:sessions` — sorted set: every legacy session holding state
    /// (member `<scope tag>:<hex id>`, score: its expiry, Unix ms), for
    /// `max_legacy_sessions`. Only maintained when writes carry that limit.
    pub fn sessions(&self) -> String {
        format!("{}:sessions", self.prefix)
    }

    /// A session's member in [`Keys::sessions`].
    pub fn sessions_member(owner: &Scope, session: &str) -> String {
        let mut member = String::with_capacity(scope_tag_len(owner) + 1 + 2 * session.len());
        push_scope_tag(&mut member, owner);
        member.push(':');
        let _ = write_hex(&mut member, session.as_bytes());
        member
    }

    /// `{prefix}:topic:<hex name>` — pub/sub channel: one topic of the event
    /// bus ([`presa_store::EventBus::publish_to`]), e.g. a legacy session's answers.
    pub fn topic(&self, name: &str) -> String {
        format!("{}:topic:{}", self.prefix, hex(name.as_bytes()))
    }

    /// `{prefix}:bus` — pub/sub channel: server-wide events ([`presa_store::EventBus`]).
    pub fn bus(&self) -> String {
        format!("{}:bus", self.prefix)
    }
}

/// `{pNN}`: the hash tag of a partition's keys (spelt once per partition
/// in [`Keys::new`]).
struct PartitionTag(u16);

impl std::fmt::Display for PartitionTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{{p{:02}}}", self.0)
    }
}

/// `{s.<hex tenant>.<hex subject>}`: the hash tag of a scope's keys, written
/// straight into the key being built.
fn push_scope_tag(key: &mut String, scope: &Scope) {
    key.push_str("{s.");
    let _ = write_hex(key, scope.tenant.as_bytes());
    key.push('.');
    let _ = write_hex(key, scope.subject.as_bytes());
    key.push('}');
}

/// How long [`push_scope_tag`]'s tag of `scope` is.
fn scope_tag_len(scope: &Scope) -> usize {
    5 + 2 * (scope.tenant.len() + scope.subject.len())
}

/// [`hex`] into a formatter.
fn write_hex(f: &mut impl std::fmt::Write, bytes: &[u8]) -> std::fmt::Result {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        f.write_char(DIGITS[usize::from(b >> 4)] as char)?;
        f.write_char(DIGITS[usize::from(b & 0xf)] as char)?;
    }
    Ok(())
}

/// Lower-case hex, so any scope string is a safe key part (no braces, no
/// separators) and distinct scopes never share a key.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    let _ = write_hex(&mut out, bytes);
    out
}

mod limits;

#[cfg(test)]
mod tests;
