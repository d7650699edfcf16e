//! A task's record as the store reads and writes it: the JSON doc
//! ([`encode`], [`decode`]), reads that treat an expired task as gone, and
//! the compare-and-set write (`transition.lua`, or `bury.lua` with a dead
//! letter) with the scope steps a cluster runs around it
//! ([`Topology::spans_slots`](crate::topology::Topology::spans_slots)).

use presa_store::{Cas, DeadLetter, GetView, StoreError, Task, TaskId, Writer, util::now_ms};
use redis::Value;

use crate::{
    RedisStore, RedisStoreError,
    create::optional,
    durability::Replication,
    keys::GROUP,
    quota::{Resized, reservation_expiry},
};

impl RedisStore {
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
    pub(crate) async fn write(
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
            Some(quota) if cluster => {
                match self.scope_bytes().resize(&next.scope, &next.id, doc.len(), Some(quota), None).await? {
                    Resized::Refused => {
                        return Err(StoreError::Capacity { limit: presa_store::Limit::MaxBytesPerScope });
                    }
                    Resized::Was(before) => Some(before),
                    Resized::Unreserved => None,
                }
            }
            _ => None,
        };
        let mut inv = self.transition_script(letter)?;
        inv.key(&key)
            .key(&channel)
            .key(keys.work(partition))
            .key(keys.claimed(partition))
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
            inv.arg(optional(quota)).arg(now_ms()).arg(reservation_expiry(next));
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
                    self.active_tasks().forget(&next.scope, &next.id).await;
                    self.scope_bytes().recount(&next.scope, &next.id, doc.len(), Some(reservation_expiry(next))).await;
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
            [Value::Int(2)] => return Err(StoreError::Capacity { limit: presa_store::Limit::MaxBytesPerScope }),
            [Value::Int(0)] | [Value::Int(0), Value::Nil] => Cas::Conflict(None),
            [Value::Int(0), stored] => {
                let stored: String =
                    redis::from_redis_value_ref(stored).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
                if let Some(before) = counted_from {
                    // Counted first, lost: count what is stored (what was counted before, if unreadable).
                    let now = decode(stored.as_bytes()).ok().and_then(|t| encode(&t).ok()).map(|d| d.len());
                    self.scope_bytes().recount(&next.scope, &next.id, now.unwrap_or(before as usize), None).await;
                }
                Cas::Conflict(decode_live(Some(stored.as_bytes()))?)
            }
            other => return Err(RedisStoreError::Corrupt(format!("unexpected transition.lua reply: {other:?}")).into()),
        };
        Ok(cas)
    }
}

/// The whole task as the JSON stored in `doc` and published on its channel.
pub(crate) fn encode(task: &Task) -> Result<String, RedisStoreError> {
    // A small task's doc is 400 to 600 bytes: one allocation, no regrowth.
    let mut doc = Vec::with_capacity(1024);
    serde_json::to_writer(&mut doc, task).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
    String::from_utf8(doc).map_err(|e| RedisStoreError::Corrupt(e.to_string()))
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
