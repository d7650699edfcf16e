//! [`RedisStore`]: connecting, and the record side of [`TaskStore`] (create,
//! read, compare-and-set, watch) plus the [`EventBus`]. Work claims live in
//! `work/`, the per-scope limit in `limits.rs`.

use std::{sync::Arc, time::Instant};

use futures::StreamExt;
use presa_store::{
    Cas, Claim, CreateLimits, Created, DeadLetter, DeadLetterFilter, DeadLetterPage, EventBus, EventStream, GetView,
    Idempotency, NewTask, PartitionStats, Scope, SessionLimits, StoreError, Task, TaskId, TaskStore, TaskStream,
    Writer,
    util::{new_task_id_in, now_ms},
};
use redis::{Cmd, FromRedisValue, Value};

use crate::{
    RedisConfig, RedisStoreError,
    conn::{Endpoint, Healing, Target, Verbosity, command_name, traced},
    durability::Replication,
    hub::Hub,
    keys::{GROUP, Keys},
    quota::{Resized, reservation_expiry},
    scripts::{self, Invocation},
    topology::Topology,
};

/// The Redis-backed task store and event bus. Cheap to clone (shared inner).
#[derive(Debug, Clone)]
pub struct RedisStore {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) cfg: RedisConfig,
    pub(crate) keys: Keys,
    pub(crate) conn: Healing,
    /// Standalone or cluster, and what only that one needs.
    pub(crate) topology: Topology,
    /// Connections confirming writes with `WAIT` (replicated durability only).
    pub(crate) confirming: Option<crate::durability::Confirming>,
    /// How connections reach Redis (with Sentinel: where the primary is found).
    pub(crate) endpoint: Endpoint,
    pub(crate) hub: Hub,
    /// What spans say about where commands go.
    pub(crate) target: Target,
    /// The work queue's read side: partition rotation, drained cursors.
    pub(crate) reader: crate::work::Reader,
    /// The epoch this process saw, and the last data loss it detected.
    pub(crate) epoch: crate::epoch::EpochState,
    /// When the work queue last looked for lapsed leases and held work.
    pub(crate) recovery: crate::work::Recovery,
}

impl RedisStore {
    /// Connect, and make sure every partition stream has its consumer group.
    /// Fails within about `op_timeout` when Redis is unreachable.
    /// Use [`open`](Self::open) to start without Redis.
    pub async fn connect(cfg: RedisConfig) -> Result<RedisStore, RedisStoreError> {
        let store = Self::open(cfg)?;
        store.ensure_groups().await?;
        Ok(store)
    }

    /// The store, without reaching Redis yet (only a bad configuration
    /// fails): the first command connects, and every command after a lost
    /// connection reconnects. For pods that start unready while Redis is
    /// down; the consumer groups are made by the first claim that misses them.
    ///
    /// `rediss://` uses rustls with the *ring* provider, installed here as
    /// the process default unless the process installed one already.
    pub fn open(cfg: RedisConfig) -> Result<RedisStore, RedisStoreError> {
        cfg.validate()?;
        // redis-rs builds its TLS config from the process-default provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let endpoint = Endpoint::resolve(&cfg)?;
        let conn = Healing::new(&cfg, &endpoint);
        let topology = Topology::open(&cfg, &endpoint)?;
        crate::metrics::register();
        let store = RedisStore {
            inner: Arc::new(Inner {
                keys: Keys::new(cfg.prefix.clone(), cfg.partitions),
                hub: Hub::spawn(&cfg, endpoint.clone()),
                target: Target::new(&cfg, &endpoint),
                conn,
                topology,
                confirming: crate::durability::Confirming::new(&cfg, &endpoint),
                endpoint,
                reader: Default::default(),
                epoch: Default::default(),
                recovery: Default::default(),
                cfg,
            }),
        };
        if let Some(sentinels) = store.inner.endpoint.sentinels() {
            tokio::spawn(crate::sentinel::watch(sentinels.clone(), Arc::downgrade(&store.inner)));
        }
        Ok(store)
    }

    /// The key layout this store uses.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.cfg
    }

    /// Round-trip to Redis (for readiness probes).
    pub async fn ping(&self) -> Result<(), RedisStoreError> {
        self.query::<Value>(Verbosity::Debug, &redis::cmd("PING")).await.map(|_| ())
    }

    /// Whether Redis accepts writes: a tiny expiring `SET`, refused (`OOM
    /// command not allowed`) when Redis is at `maxmemory` with `noeviction`.
    pub async fn probe_write(&self) -> Result<(), RedisStoreError> {
        let probe = redis::cmd("SET").arg(self.inner.keys.ready_probe()).arg(1).arg("PX").arg(10_000).to_owned();
        self.query::<Value>(Verbosity::Debug, &probe).await.map(|_| ())
    }

    /// With Sentinel: why no primary was found lately (the Sentinels name
    /// none, or one that is gone or read-only: a failover in progress; or
    /// no Sentinel answers), while none was found since. `None` otherwise.
    /// For `/readyz`, whose writes fail meanwhile.
    pub fn failover_trouble(&self) -> Option<String> {
        self.inner.endpoint.trouble()
    }

    /// How long since Redis last answered one of this store's commands
    /// (since the store was opened when it never did): the liveness signal.
    pub fn silent_for(&self) -> std::time::Duration {
        self.inner.conn.silent_for()
    }

    pub(crate) fn op_timeout(&self) -> std::time::Duration {
        self.inner.cfg.op_timeout
    }

    /// `PUBLISH` or `SPUBLISH` (see [`Topology::publish_cmd`]).
    pub(crate) fn publish_cmd(&self) -> &'static str {
        self.inner.topology.publish_cmd()
    }

    /// `SPUBLISH` or nothing (see [`Topology::wake_cmd`]).
    pub(crate) fn wake_cmd(&self) -> &'static str {
        self.inner.topology.wake_cmd()
    }

    /// Run a script invocation bounded by `op_timeout`, in a
    /// `redis EVALSHA <script>` span.
    pub(crate) async fn invoke<T: FromRedisValue>(&self, inv: &Invocation<'_>) -> Result<T, RedisStoreError> {
        let mut c = self.inner.conn.get().await.inspect_err(crate::metrics::failed)?;
        let (lua, limit) = (inv.lua, self.op_timeout());
        let started = Instant::now();
        let r = traced(
            &self.inner.target,
            lua.verbosity,
            || "EVALSHA".into(),
            Some(lua.name),
            limit,
            inv.invoke_async(&mut c),
        )
        .await;
        self.inner.conn.record(&r);
        crate::metrics::round_trip(lua.name, started.elapsed(), &r);
        r
    }

    /// Run a command on the shared connection bounded by `op_timeout`, in a
    /// `redis <COMMAND>` span.
    pub(crate) async fn query<T: FromRedisValue>(&self, verbosity: Verbosity, cmd: &Cmd) -> Result<T, RedisStoreError> {
        let mut c = self.inner.conn.get().await.inspect_err(crate::metrics::failed)?;
        let name = || command_name(cmd);
        let started = Instant::now();
        let r = traced(&self.inner.target, verbosity, name, None, self.op_timeout(), cmd.query_async(&mut c)).await;
        self.inner.conn.record(&r);
        let operation = match cmd.args_iter().next() {
            Some(redis::Arg::Simple(name)) => crate::metrics::command_operation(name),
            _ => "other",
        };
        crate::metrics::round_trip(operation, started.elapsed(), &r);
        r
    }

    /// The stored task (any scope); `None` when gone or expired.
    pub(crate) async fn read(&self, id: &TaskId) -> Result<Option<Task>, RedisStoreError> {
        let Some(key) = self.inner.keys.task(id) else {
            return Ok(None);
        };
        decode_live(self.read_doc(&key).await?.as_deref())
    }

    /// What `tasks/get` needs of the stored task (any scope): only the
    /// fields of the view are decoded. `None` when gone or expired.
    pub(crate) async fn read_view(&self, id: &TaskId) -> Result<Option<GetView>, RedisStoreError> {
        let Some(key) = self.inner.keys.task(id) else {
            return Ok(None);
        };
        let Some(doc) = self.read_doc(&key).await? else {
            return Ok(None);
        };
        let view = GetView::from_doc(&doc).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
        Ok((!view.is_expired(now_ms())).then_some(view))
    }

    /// `transition.lua`: compare-and-set `next` as `writer`; with a worker's
    /// work `entry`, a write that ends the task removes that entry too. The
    /// task is counted at its new size under its scope's byte quota, and a
    /// client write growing a live task past `quota` is refused (see `quota.rs`).
    /// With a dead `letter`, `bury.lua` records it with the write (`dead.rs`).
    async fn write(
        &self,
        next: &Task,
        writer: Writer,
        entry: Option<&str>,
        quota: Option<u64>,
        letter: Option<&DeadLetter>,
    ) -> Result<Cas, StoreError> {
        let keys = &self.inner.keys;
        let (Some(key), Some(channel), Some(partition)) =
            (keys.task(&next.id), keys.events(&next.id), keys.partition_of(&next.id))
        else {
            return Ok(Cas::Conflict(None));
        };
        let Some(expected) = next.revision.checked_sub(1) else {
            return Ok(Cas::Conflict(self.read(&next.id).await?));
        };
        let fence = match writer {
            Writer::Client => String::new(),
            Writer::Worker { attempt } => attempt.to_string(),
        };
        let doc = encode(next)?;
        let quota = presa_store::growth_quota(next, writer, quota);
        // One script can take the scope's keys too (standalone), or not (a cluster).
        let cluster = !self.inner.topology.spans_slots();
        // A cluster counts a refusable write's growth first, in the scope's slot.
        let counted_from = match quota {
            Some(quota) if cluster => match self.resize_bytes(&next.scope, &next.id, doc.len(), Some(quota)).await? {
                Resized::Refused => return Err(StoreError::Capacity { limit: BYTE_QUOTA }),
                Resized::Was(before) => Some(before),
                Resized::Unreserved => None,
            },
            _ => None,
        };
        let mut inv = self.transition_script(letter)?;
        inv.key(&key)
            .key(&channel)
            .key(keys.work(partition))
            .arg(expected)
            .arg(fence)
            .arg(&doc)
            .arg(next.revision)
            .arg(next.status.as_str())
            .arg(self.publish_cmd())
            .arg(GROUP)
            .arg(entry.unwrap_or_default());
        // Standalone: the script also takes an ending task out of its scope's
        // active set, and counts (or refuses) its new size.
        if !cluster {
            inv.key(keys.scope_active(&next.scope)).arg(next.id.as_str());
            for key in keys.scope_byte_keys(&next.scope) {
                inv.key(key);
            }
            inv.arg(optional(quota)).arg(now_ms());
        }
        // Replicated durability confirms the write that ends a task.
        let (reply, replication): (Vec<Value>, _) = if next.status.is_terminal() {
            self.invoke_confirmed(&inv).await?
        } else {
            (self.invoke(&inv).await?, Replication::Confirmed)
        };
        let cas = match reply.as_slice() {
            [Value::Int(1)] => {
                if cluster && next.status.is_terminal() {
                    self.forget_active(&next.scope, &next.id).await;
                    self.recount_bytes(&next.scope, &next.id, doc.len()).await;
                }
                if let Replication::Short { acked, wanted } = replication {
                    // A client's cancel is answered as not confirmed (its retry finds
                    // the task cancelled, or cancels it again after a failover); a
                    // worker's outcome stays: the work entry it removed comes back
                    // with a failover that loses the write, and runs again.
                    tracing::warn!(task_id = %next.id, status = next.status.as_str(), acked, wanted,
                        "a task's last write was not confirmed by its replicas in time");
                    if writer == Writer::Client {
                        return Err(RedisStoreError::Unconfirmed { acked, wanted }.into());
                    }
                }
                Cas::Applied(next.clone())
            }
            [Value::Int(2)] => return Err(StoreError::Capacity { limit: BYTE_QUOTA }),
            [Value::Int(0)] | [Value::Int(0), Value::Nil] => Cas::Conflict(None),
            [Value::Int(0), stored] => {
                let stored: String =
                    redis::from_redis_value_ref(stored).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
                if let Some(before) = counted_from {
                    // Counted first, lost: count what is stored (what was counted before, if unreadable).
                    let now = decode(stored.as_bytes()).ok().and_then(|t| encode(&t).ok()).map(|d| d.len());
                    self.recount_bytes(&next.scope, &next.id, now.unwrap_or(before as usize)).await;
                }
                Cas::Conflict(decode_live(Some(stored.as_bytes()))?)
            }
            other => return Err(RedisStoreError::Corrupt(format!("unexpected transition.lua reply: {other:?}")).into()),
        };
        Ok(cas)
    }

    /// Admission, byte reservation and creation as one `create_scoped.lua`
    /// (standalone Redis: the scope's keys and the task's may share a script).
    async fn create_scoped(
        &self,
        task: &Task,
        limits: CreateLimits,
        idempotency: Option<&Idempotency>,
    ) -> Result<Outcome, RedisStoreError> {
        let doc = encode(task)?;
        let keys = &self.inner.keys;
        let mut inv = scripts::CREATE_SCOPED.prepare_invoke();
        self.create_args(&mut inv, task, &doc, limits.max_queued_per_partition, None);
        inv.key(keys.scope_active(&task.scope))
            .key(keys.scope_bytes(&task.scope))
            .key(keys.scope_bytes_sizes(&task.scope))
            .key(keys.scope_bytes_total(&task.scope))
            .arg(optional(limits.max_active_per_scope))
            .arg(optional(limits.max_bytes_per_scope))
            .arg(doc.len())
            .arg(reservation_expiry(task));
        if let Some(key) = idempotency {
            inv.key(self.idempotency_key(task, key)).arg(&key.fingerprint);
        }
        let (reply, replication) = self.invoke_confirmed::<Value>(&inv).await?;
        self.confirmed(created(reply)?, replication).await
    }

    /// A create's outcome once replicated durability had its say: a new task
    /// fewer replicas confirmed than asked is [`RedisStoreError::Unconfirmed`]
    /// (it is on the primary: a retry under its idempotency key returns it),
    /// and a replayed one is confirmed again (its first answer may have been
    /// that error).
    async fn confirmed(&self, outcome: Outcome, replication: Replication) -> Result<Outcome, RedisStoreError> {
        let replication = match &outcome {
            Outcome::Yes(_) => replication,
            Outcome::Replayed(task) => match self.inner.keys.partition_of(&task.id) {
                Some(partition) => self.confirm_partition(partition).await?,
                None => replication,
            },
            _ => return Ok(outcome),
        };
        match replication {
            Replication::Confirmed => Ok(outcome),
            Replication::Short { acked, wanted } => Err(RedisStoreError::Unconfirmed { acked, wanted }),
        }
    }

    /// A keyed create's record: in `task`'s partition (the one the key names).
    fn idempotency_key(&self, task: &Task, key: &Idempotency) -> String {
        let partition = self.inner.keys.partition_of(&task.id).expect("fresh ids are in range");
        self.inner.keys.idempotency(partition, key)
    }

    /// `replay.lua`: the task `key` made before, if any (a cluster's first
    /// step of a keyed create).
    async fn replay(&self, task: &Task, key: &Idempotency) -> Result<Outcome, RedisStoreError> {
        let mut inv = scripts::REPLAY.prepare_invoke();
        inv.key(self.idempotency_key(task, key)).arg(&key.fingerprint);
        match self.invoke::<Value>(&inv).await? {
            Value::Nil => Ok(Outcome::Fresh),
            other => created(other),
        }
    }

    /// Admission, byte reservation and creation as three scripts, one after
    /// another (a cluster: the scope's keys live in another slot than the
    /// task's). Whatever was taken before a refusal is given back; after an
    /// error it lapses with the task's expiry (the create may have happened).
    async fn create_in_steps(
        &self,
        task: &Task,
        limits: CreateLimits,
        idempotency: Option<&Idempotency>,
    ) -> Result<Outcome, RedisStoreError> {
        if let Some(key) = idempotency {
            match self.replay(task, key).await? {
                Outcome::Fresh => {}
                found => return self.confirmed(found, Replication::Confirmed).await,
            }
        }
        let admit = limits.max_active_per_scope.is_some();
        let mut usage = Usage::default();
        if let Some(limit) = limits.max_active_per_scope {
            match self.try_admit(task, limit).await? {
                Some(active) => usage.active = Some(active),
                None => return Ok(Outcome::Refused(ACTIVE_LIMIT)),
            }
        }
        let reserved = match limits.max_bytes_per_scope {
            Some(quota) => self.reserve_bytes(task, quota).await.map(|r| r.map(Some)),
            None => Ok(Some(None)),
        };
        match reserved {
            Ok(Some(bytes)) => usage.bytes = bytes,
            refused => {
                if admit {
                    self.forget_active(&task.scope, &task.id).await;
                }
                return refused.map(|_| Outcome::Refused(BYTE_QUOTA));
            }
        }
        let doc = encode(task)?;
        let mut inv = scripts::CREATE.prepare_invoke();
        let record = idempotency.map(|key| (self.idempotency_key(task, key), key.fingerprint.as_str()));
        self.create_args(&mut inv, task, &doc, limits.max_queued_per_partition, record);
        let (reply, replication) = self.invoke_confirmed::<Value>(&inv).await?;
        let created = match self.confirmed(created(reply)?, replication).await? {
            Outcome::Yes(_) => Outcome::Yes(usage),
            other => other,
        };
        if !matches!(created, Outcome::Yes(_)) {
            if admit {
                self.forget_active(&task.scope, &task.id).await;
            }
            if limits.max_bytes_per_scope.is_some() {
                self.unreserve_bytes(task).await;
            }
        }
        Ok(created)
    }

    /// `create.lua`'s keys and arguments (the first ones of `create_scoped.lua`),
    /// with a keyed create's `record` key and fingerprint (create.lua only).
    fn create_args(
        &self,
        inv: &mut Invocation<'_>,
        task: &Task,
        doc: &str,
        max_queued: Option<u64>,
        record: Option<(String, &str)>,
    ) {
        let keys = &self.inner.keys;
        let partition = keys.partition_of(&task.id).expect("fresh ids are in range");
        inv.key(keys.task(&task.id).expect("fresh ids are in range"))
            .key(keys.work(partition))
            .key(keys.wake(partition))
            .arg(task.id.as_str())
            .arg(doc)
            .arg(task.revision)
            .arg(task.attempt)
            .arg(task.status.as_str())
            .arg(optional(task.expires_at_ms()))
            .arg(self.wake_cmd())
            .arg(optional(max_queued))
            .key(keys.task_index(partition, &task.scope.tenant))
            .key(keys.task_tenants(partition))
            .arg(if self.inner.cfg.task_index { "1" } else { "" })
            .arg(Keys::tenant_word(&task.scope.tenant))
            .arg(now_ms());
        if let Some((key, fingerprint)) = record {
            inv.key(key).arg(fingerprint);
        }
    }
}

/// A script argument that may be absent: the number, or "".
fn optional(n: Option<u64>) -> String {
    n.map(|n| n.to_string()).unwrap_or_default()
}

/// What `create.lua` (or `create_scoped.lua`) replied.
fn created(reply: Value) -> Result<Outcome, RedisStoreError> {
    let count = |v: &Value| match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match reply {
        Value::Nil => Ok(Outcome::Collided),
        Value::Int(0) => Ok(Outcome::QueueFull),
        Value::Int(-1) => Ok(Outcome::Refused(ACTIVE_LIMIT)),
        Value::Int(-2) => Ok(Outcome::Refused(BYTE_QUOTA)),
        Value::Int(-3) => Ok(Outcome::KeyReused),
        Value::Array(parts)
            if parts.len() == 2 && matches!(&parts[0], Value::BulkString(tag) if tag.as_slice() == b"replay") =>
        {
            let doc: String =
                redis::from_redis_value_ref(&parts[1]).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
            Ok(Outcome::Replayed(Box::new(decode(doc.as_bytes())?)))
        }
        Value::BulkString(_) | Value::SimpleString(_) => Ok(Outcome::Yes(Usage::default())),
        Value::Array(parts)
            if parts.len() == 3 && matches!(parts[0], Value::BulkString(_) | Value::SimpleString(_)) =>
        {
            Ok(Outcome::Yes(Usage { active: count(&parts[1]), bytes: count(&parts[2]) }))
        }
        other => Err(RedisStoreError::Corrupt(format!("unexpected create reply: {other:?}"))),
    }
}

/// The limits a refused create names (`StoreError::Capacity`).
const ACTIVE_LIMIT: &str = "max_active_tasks_per_scope";
const BYTE_QUOTA: &str = presa_store::BYTES_LIMIT;

/// A scope's use of its quotas right after a create (what the scripts counted).
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    /// Its active tasks, this one included (`None`: no limit).
    active: Option<u64>,
    /// Its reserved bytes, this task's included (`None`: no quota).
    bytes: Option<u64>,
}

/// What a create script did.
enum Outcome {
    /// The task and its work entry were written; the scope's quota use after it.
    Yes(Usage),
    /// The id was taken; nothing was written.
    Collided,
    /// The partition's work stream is full; nothing was written.
    QueueFull,
    /// The scope is at this limit; nothing was written.
    Refused(&'static str),
    /// The idempotency key made this task before (same request); nothing was written.
    Replayed(Box<Task>),
    /// The idempotency key was used for another request; nothing was written.
    KeyReused,
    /// `replay.lua`: the idempotency key is new (the create goes on).
    Fresh,
}

/// The whole task as the JSON stored in `doc` and published on its channel.
pub(crate) fn encode(task: &Task) -> Result<String, RedisStoreError> {
    serde_json::to_string(task).map_err(|e| RedisStoreError::Corrupt(e.to_string()))
}

pub(crate) fn decode(doc: &[u8]) -> Result<Task, RedisStoreError> {
    serde_json::from_slice(doc).map_err(|e| RedisStoreError::Corrupt(e.to_string()))
}

/// Decode a stored doc, treating an expired task as gone (Redis reaps it at
/// `createdAt + ttlMs`; this covers the moments before it does).
pub(crate) fn decode_live(doc: Option<&[u8]>) -> Result<Option<Task>, RedisStoreError> {
    let Some(doc) = doc else {
        return Ok(None);
    };
    let task = decode(doc)?;
    Ok((!task.is_expired(now_ms())).then_some(task))
}

#[async_trait::async_trait]
impl TaskStore for RedisStore {
    async fn create_idempotent(
        &self,
        new: NewTask,
        limits: CreateLimits,
        idempotency: Option<&Idempotency>,
    ) -> Result<Created, StoreError> {
        let now = now_ms();
        let partitions = self.inner.cfg.partitions;
        let partition = idempotency.map(|key| key.partition(partitions));
        // A 128-bit id collides practically never; retry a couple of times anyway.
        for _ in 0..3 {
            let task = Task::new(new_task_id_in(partitions, partition), new.clone(), now);
            let created = if self.inner.topology.spans_slots() {
                self.create_scoped(&task, limits, idempotency).await?
            } else {
                self.create_in_steps(&task, limits, idempotency).await?
            };
            match created {
                Outcome::Yes(usage) => {
                    use presa_store::metrics::{ACTIVE_TASKS_QUOTA, BYTES_QUOTA, quota_usage};
                    if let Some(active) = usage.active {
                        quota_usage(ACTIVE_TASKS_QUOTA, active, limits.max_active_per_scope);
                    }
                    if let Some(bytes) = usage.bytes {
                        quota_usage(BYTES_QUOTA, bytes, limits.max_bytes_per_scope);
                    }
                    return Ok(Created::New(task));
                }
                Outcome::Replayed(task) => return Ok(Created::Replayed(*task)),
                Outcome::KeyReused => return Err(StoreError::KeyReused),
                Outcome::Collided | Outcome::Fresh => {}
                Outcome::QueueFull => return Err(StoreError::QueueFull),
                Outcome::Refused(limit) => return Err(StoreError::Capacity { limit }),
            }
        }
        Err(StoreError::Corrupt("task id collided three times".into()))
    }

    async fn get(&self, scope: &Scope, id: &TaskId) -> Result<Option<Task>, StoreError> {
        Ok(self.read(id).await?.filter(|t| &t.scope == scope))
    }

    async fn get_view(&self, scope: &Scope, id: &TaskId) -> Result<Option<GetView>, StoreError> {
        Ok(self.read_view(id).await?.filter(|v| &v.scope == scope))
    }

    async fn load(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        Ok(self.read(id).await?)
    }

    async fn transition_within(&self, next: &Task, writer: Writer, quota: Option<u64>) -> Result<Cas, StoreError> {
        self.write(next, writer, None, quota, None).await
    }

    async fn conclude(&self, next: &Task, claim: &Claim) -> Result<Cas, StoreError> {
        // A receipt that is not this store's (never, from its own claims)
        // leaves the work to the claims that find the task ended.
        let entry = self.locate(claim).ok().map(|(_, _, entry)| entry);
        self.write(next, claim.writer(), entry.as_deref(), None, None).await
    }

    async fn conclude_dead(&self, next: &Task, claim: &Claim, reason: &str) -> Result<Cas, StoreError> {
        let entry = self.locate(claim).ok().map(|(_, _, entry)| entry);
        let letter = next.status.is_terminal().then(|| DeadLetter::of(claim, reason, next.updated_at_ms));
        self.write(next, claim.writer(), entry.as_deref(), None, letter.as_ref()).await
    }

    async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, StoreError> {
        self.list_dead(filter, after, limit).await
    }

    async fn dead_letter(&self, tenant: &str, id: &TaskId) -> Result<Option<DeadLetter>, StoreError> {
        self.read_dead(tenant, id).await
    }

    async fn mark_dead_letter_replayed(
        &self,
        tenant: &str,
        id: &TaskId,
        new: &TaskId,
    ) -> Result<Option<TaskId>, StoreError> {
        self.mark_dead(tenant, id, new).await
    }

    async fn discard_dead_letter(&self, tenant: &str, id: &TaskId) -> Result<bool, StoreError> {
        self.discard_dead(tenant, id).await
    }

    async fn claim_fair(
        &self,
        worker: &str,
        max: usize,
        lease: std::time::Duration,
        wait: std::time::Duration,
        shares: &presa_store::Shares,
    ) -> Result<Vec<Claim>, StoreError> {
        // Run in its own task so that a caller dropping this future (say, a
        // worker shutting down mid-wait) strands nothing: entries delivered
        // to a claim nobody receives would otherwise sit until `max_lease`.
        // The task stops waiting once the caller is gone and releases
        // whatever it had claimed by then.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let store = self.clone();
        let worker = worker.to_owned();
        let shares = shares.clone();
        tokio::spawn(async move {
            let result = store.claim_work(&worker, max, lease, wait, &shares, &|| tx.is_closed()).await;
            if let Err(Ok(claims)) = tx.send(result) {
                for claim in claims {
                    if let Err(e) = store.release_work(&claim).await {
                        tracing::warn!(error = %e, "could not release an unreceived claim");
                    }
                }
            }
        });
        rx.await.map_err(|_| StoreError::Unavailable("claim task stopped".into()))?.map_err(StoreError::from)
    }

    async fn renew(&self, claim: &Claim, lease: std::time::Duration) -> Result<bool, StoreError> {
        Ok(self.renew_work(claim, lease).await?)
    }

    async fn remove_work(&self, claim: &Claim) -> Result<(), StoreError> {
        Ok(self.remove_claimed_work(claim).await?)
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        Ok(self.release_work(claim).await?)
    }

    async fn work_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        Ok(self.partition_stats().await?)
    }

    async fn set_session_field(
        &self,
        owner: &Scope,
        session: &str,
        field: &str,
        value: Option<&str>,
        ttl: std::time::Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        let op = if value.is_some() { "set" } else { "del" };
        self.write_session(owner, session, op, field, value.unwrap_or_default(), ttl, limits).await
    }

    async fn end_session(
        &self,
        owner: &Scope,
        session: &str,
        field: &str,
        ttl: std::time::Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        self.write_session(owner, session, "end", field, "1", ttl, limits).await
    }

    async fn session_state(
        &self,
        owner: &Scope,
        session: &str,
    ) -> Result<std::collections::HashMap<String, String>, StoreError> {
        let key = self.inner.keys.session(owner, session);
        let mut state: std::collections::HashMap<String, String> =
            self.query(Verbosity::Info, redis::cmd("HGETALL").arg(&key)).await?;
        state.retain(|field, _| !field.starts_with('#'));
        Ok(state)
    }

    async fn watch(&self, ids: &[TaskId]) -> Result<TaskStream, StoreError> {
        let channels: Vec<String> = ids.iter().filter_map(|id| self.inner.keys.events(id)).collect();
        if channels.is_empty() {
            // Ids that name no task never change.
            return Ok(Box::pin(futures::stream::pending()));
        }
        let sub = self.inner.hub.subscribe(channels).await?;
        Ok(Box::pin(sub.filter_map(|d| async move {
            let d = d.ok()?;
            match decode(&d.payload) {
                Ok(task) => Some(task),
                Err(e) => {
                    tracing::warn!(channel = %d.channel, error = %e, "undecodable task snapshot");
                    None
                }
            }
        })))
    }
}

#[async_trait::async_trait]
impl EventBus for RedisStore {
    async fn publish(&self, event: &str) -> Result<(), StoreError> {
        presa_store::check_event(event)?;
        self.publish_on(self.inner.keys.bus(), event).await
    }

    async fn subscribe(&self) -> Result<EventStream, StoreError> {
        self.events_of(self.inner.keys.bus(), presa_store::BUS_QUEUE).await
    }

    async fn publish_to(&self, topic: &str, message: &str) -> Result<(), StoreError> {
        self.publish_on(self.inner.keys.topic(topic), message).await
    }

    async fn subscribe_to(&self, topic: &str) -> Result<EventStream, StoreError> {
        self.events_of(self.inner.keys.topic(topic), presa_store::TOPIC_QUEUE).await
    }
}

impl RedisStore {
    /// One write of `session.lua` (`op`: `set`, `del`, `end`) and, for a
    /// session that starts holding state under a store-wide limit,
    /// `session_admit.lua` in between; a session admitted store-wide that its
    /// scope then refuses (a race) is taken out again.
    #[allow(clippy::too_many_arguments)]
    async fn write_session(
        &self,
        owner: &Scope,
        session: &str,
        op: &str,
        field: &str,
        value: &str,
        ttl: std::time::Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        let keys = &self.inner.keys;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let now = now_ms();
        let write = |admitted: bool| {
            let mut inv = scripts::SESSION.prepare_invoke();
            inv.key(keys.session(owner, session))
                .key(keys.scope_sessions(owner))
                .arg(op)
                .arg(field)
                .arg(value)
                .arg(ttl_ms)
                .arg(now)
                .arg(limits.max_fields.unwrap_or(0))
                .arg(limits.max_bytes.unwrap_or(0))
                .arg(limits.max_per_scope.unwrap_or(0))
                .arg(Keys::session_member(session))
                .arg(if admitted { "1" } else { "0" })
                .arg(limits.counted_prefix);
            inv
        };
        let first: String = self.invoke(&write(limits.max_sessions.is_none())).await?;
        if first != "admit" {
            return session_reply(&first);
        }
        let member = Keys::sessions_member(owner, session);
        let mut admit = scripts::SESSION_ADMIT.prepare_invoke();
        admit.key(keys.sessions()).arg(&member).arg(now).arg(ttl_ms).arg(limits.max_sessions.unwrap_or(0));
        let admitted: i64 = self.invoke(&admit).await?;
        if admitted == 0 {
            return Err(StoreError::Capacity { limit: presa_store::SESSIONS_LIMIT });
        }
        let second: String = self.invoke(&write(true)).await?;
        let outcome = session_reply(&second);
        if outcome.is_err() {
            let undo = redis::cmd("ZREM").arg(keys.sessions()).arg(&member).to_owned();
            let _: Result<Value, _> = self.query(Verbosity::Info, &undo).await;
        }
        outcome
    }

    async fn publish_on(&self, channel: String, message: &str) -> Result<(), StoreError> {
        let cmd = redis::cmd(self.publish_cmd()).arg(channel).arg(message).to_owned();
        self.query::<Value>(Verbosity::Info, &cmd).await?;
        Ok(())
    }

    /// The messages of `channel` through a queue of `limits` that ends its subscriber when it lags.
    async fn events_of(
        &self,
        channel: String,
        limits: presa_store::fanout::QueueLimits,
    ) -> Result<EventStream, StoreError> {
        let sub = self.inner.hub.subscribe_with(vec![channel], limits, presa_store::fanout::Overflow::End).await?;
        Ok(Box::pin(sub.map(|d| d.map(|d| String::from_utf8_lossy(&d.payload).into_owned()))))
    }
}

/// What `session.lua` answered, as an outcome.
fn session_reply(reply: &str) -> Result<(), StoreError> {
    use presa_store::{SESSION_BYTES_LIMIT, SESSION_FIELDS_LIMIT, SESSIONS_PER_SCOPE_LIMIT};
    let limit = match reply {
        "ok" => return Ok(()),
        "max_legacy_session_fields" => SESSION_FIELDS_LIMIT,
        "max_legacy_session_bytes" => SESSION_BYTES_LIMIT,
        "max_legacy_sessions_per_scope" => SESSIONS_PER_SCOPE_LIMIT,
        other => return Err(StoreError::Corrupt(format!("session.lua answered {other:?}"))),
    };
    Err(StoreError::Capacity { limit })
}
