//! Creating a task: its admission under the scope's active-task limit
//! (`limits.rs`), the reservation of its bytes under the scope's quota
//! (`quota.rs`) and the task with its work entry, as one
//! `create_scoped.lua` where one script may take the scope's keys and the
//! task's (standalone), or as steps one after another (a cluster); with an
//! idempotency key, a replay of the task it made; with replicated
//! durability, the confirmation.

use presa_store::{
    CreateLimits, Created, Idempotency, Limit, NewTask, StoreError, Task,
    util::{new_task_id_in, now_ms},
};
use redis::Value;

use super::{
    Records, ScopeSteps,
    group::{Write, alone},
    quota::counted,
};
use crate::{
    durability::Replication,
    error::RedisStoreError,
    keys::Keys,
    record::{decode, encode},
    scripts::Call,
};

impl Records {
    /// A new task of `new` under `limits` (or, under an idempotency key used
    /// before for the same request, the task it made).
    pub(crate) async fn create_idempotent(
        &self,
        new: NewTask,
        limits: CreateLimits,
        idempotency: Option<&Idempotency>,
    ) -> Result<Created, StoreError> {
        let now = now_ms();
        let partitions = self.link.cfg.partitions;
        let partition = idempotency.map(|key| key.partition(partitions));
        // A 128-bit id collides practically never; retry a couple of times anyway.
        for _ in 0..3 {
            let task = Task::new(new_task_id_in(partitions, partition), new.clone(), now);
            let created = match self.scope_steps {
                ScopeSteps::InScript => self.create_scoped(&task, limits, idempotency).await?,
                ScopeSteps::Around => self.create_in_steps(&task, limits, idempotency).await?,
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

    /// Admission, byte reservation and creation as one `create_scoped.lua`
    /// (standalone Redis: the scope's keys and the task's may share a script).
    async fn create_scoped(
        &self,
        task: &Task,
        limits: CreateLimits,
        idempotency: Option<&Idempotency>,
    ) -> Result<Outcome, RedisStoreError> {
        let doc = encode(task)?;
        let keys = &self.link.keys;
        let q = limits.max_bytes_per_scope.map(|_| counted(task, doc.len()));
        let mut call = self.create_call(task, &doc, limits.max_queued_per_partition, q);
        // Every create has the record's key and fingerprint, so every call
        // has as many keys and arguments (a batch's copies none): an unkeyed
        // one the fingerprint "" and, for the key, one of the prefix that
        // `create.lua` then leaves alone (the same for every call, so a
        // batch passes it once; in the prefix, for an ACL's key patterns).
        match idempotency {
            Some(key) => call.key(self.idempotency_key(task, key)).arg(&key.fingerprint),
            None => call.key(keys.ready_probe()).arg(""),
        };
        call.key(keys.scope_active(&task.scope)).key(keys.scope_bytes_buckets(&task.scope));
        call.arg(optional(limits.max_active_per_scope)).arg(optional(limits.max_bytes_per_scope));
        // Concurrent creates share one script call (`group.rs`).
        let (reply, replication) = match &self.creates {
            Some(creates) => {
                let partition = keys.partition_of(&task.id).expect("fresh ids are in range");
                creates.submit(Write { partition, call }).await?
            }
            None => alone(&self.link, &super::CREATE_SCOPED, &call).await?,
        };
        self.confirmed(Outcome::from_reply(reply)?, replication).await
    }

    /// A create's outcome once replicated durability had its say: a new task
    /// fewer replicas confirmed than asked is [`RedisStoreError::Unconfirmed`]
    /// (it is on the primary: a retry under its idempotency key returns it),
    /// and a replayed one is confirmed again (its first answer may have been
    /// that error).
    async fn confirmed(&self, outcome: Outcome, replication: Replication) -> Result<Outcome, RedisStoreError> {
        let replication = match &outcome {
            Outcome::Yes(_) => replication,
            Outcome::Replayed(task) => match self.link.keys.partition_of(&task.id) {
                Some(partition) => self.link.confirm_partition(partition).await?,
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
        let partition = self.link.keys.partition_of(&task.id).expect("fresh ids are in range");
        self.link.keys.idempotency(partition, key)
    }

    /// `replay.lua`: the task `key` made before, if any (a cluster's first
    /// step of a keyed create).
    async fn replay(&self, task: &Task, key: &Idempotency) -> Result<Outcome, RedisStoreError> {
        let mut inv = super::REPLAY.prepare_invoke();
        inv.key(self.idempotency_key(task, key)).arg(&key.fingerprint);
        match self.link.invoke::<Value>(&inv).await? {
            Value::Nil => Ok(Outcome::Fresh),
            other => Outcome::from_reply(other),
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
            match self.active_tasks().admit(task, limit).await? {
                Some(active) => usage.active = Some(active),
                None => return Ok(Outcome::Refused(Limit::MaxActiveTasksPerScope)),
            }
        }
        let reserved = match limits.max_bytes_per_scope {
            Some(quota) => self.scope_bytes().reserve(task, quota).await.map(|r| r.map(Some)),
            None => Ok(Some(None)),
        };
        match reserved {
            Ok(Some(bytes)) => usage.bytes = bytes,
            refused => {
                if admit {
                    self.active_tasks().forget(&task.scope, &task.id).await;
                }
                return refused.map(|_| Outcome::Refused(Limit::MaxBytesPerScope));
            }
        }
        let doc = encode(task)?;
        let q = limits.max_bytes_per_scope.map(|_| counted(task, doc.len()));
        let mut call = self.create_call(task, &doc, limits.max_queued_per_partition, q);
        if let Some(key) = idempotency {
            call.key(self.idempotency_key(task, key)).arg(&key.fingerprint);
        }
        let (reply, replication) = alone(&self.link, &super::CREATE, &call).await?;
        let created = match self.confirmed(Outcome::from_reply(reply)?, replication).await? {
            Outcome::Yes(_) => Outcome::Yes(usage),
            other => other,
        };
        if !matches!(created, Outcome::Yes(_)) {
            if admit {
                self.active_tasks().forget(&task.scope, &task.id).await;
            }
            if limits.max_bytes_per_scope.is_some() {
                self.scope_bytes().unreserve(task).await;
            }
        }
        Ok(created)
    }

    /// `create.lua`'s keys and arguments (the first ones of `create_scoped.lua`),
    /// with the task's `q` under a byte quota (`quota.rs`), up to the
    /// idempotency record's key and fingerprint (the caller's to add).
    fn create_call(&self, task: &Task, doc: &str, max_queued: Option<u64>, q: Option<String>) -> Call {
        let keys = &self.link.keys;
        let partition = keys.partition_of(&task.id).expect("fresh ids are in range");
        let mut call = Call::default();
        call.key(keys.task(&task.id).expect("fresh ids are in range"))
            .key(keys.work(partition))
            .key(keys.wake(partition))
            .arg(task.id.as_str())
            .arg(doc)
            .arg(task.revision)
            .arg(task.attempt)
            .arg(task.status.as_str())
            .arg(optional(task.expires_at_ms()))
            .arg(self.link.topology.wake_cmd())
            .arg(optional(max_queued))
            .key(keys.task_index(partition, &task.scope.tenant))
            .key(keys.task_tenants(partition))
            .arg(if self.link.cfg.task_index { "1" } else { "" })
            .arg(Keys::tenant_word(&task.scope.tenant))
            .arg(now_ms())
            .arg(q.unwrap_or_default());
        call
    }
}

/// A script argument that may be absent: the number, or "".
pub(super) fn optional(n: Option<u64>) -> String {
    n.map(|n| n.to_string()).unwrap_or_default()
}

impl Outcome {
    /// What `create.lua` (or `create_scoped.lua`, `replay.lua`) replied.
    fn from_reply(reply: Value) -> Result<Outcome, RedisStoreError> {
        let count = |v: &Value| match v {
            Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        match reply {
            Value::Nil => Ok(Outcome::Collided),
            Value::Int(0) => Ok(Outcome::QueueFull),
            Value::Int(-1) => Ok(Outcome::Refused(Limit::MaxActiveTasksPerScope)),
            Value::Int(-2) => Ok(Outcome::Refused(Limit::MaxBytesPerScope)),
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
}

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
    Refused(Limit),
    /// The idempotency key made this task before (same request); nothing was written.
    Replayed(Box<Task>),
    /// The idempotency key was used for another request; nothing was written.
    KeyReused,
    /// `replay.lua`: the idempotency key is new (the create goes on).
    Fresh,
}
