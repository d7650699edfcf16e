//! Claiming an entry bumps its task's fencing attempt: the reducer's
//! `Claimed` event, made in place on the task as read (`presa_tasks::claim`),
//! computes the new doc, and `claim_batch.lua` (many entries) or `claim.lua`
//! (one, retried on a lost CAS race) stores it with the lease, or drops the
//! entry of a task that is over.

use std::time::Duration;

use presa_store::{Claim, TaskId, util::now_ms};
use presa_tasks::claim;
use redis::Value;

use super::Entry;
use super::Queue;
use crate::{
    error::RedisStoreError,
    keys::GROUP,
    record::{decode, encode},
};

/// Give up bumping an attempt after this many lost CAS races (a client
/// writing in a tight loop); the entry is released for a later claim.
const CLAIM_RACES: usize = 8;

/// A delivered entry about to be claimed: its task as read and as claimed.
pub(super) struct Pending {
    pub(super) entry: Entry,
    pub(super) id: TaskId,
    pub(super) key: String,
    /// The stored rev the claim expects.
    pub(super) expected: u64,
    pub(super) next: presa_store::Task,
}

/// What a claim of one entry did (`claim.lua`, or one entry of `claim_batch.lua`).
pub(super) enum Claimed {
    /// Claimed: the new doc is stored.
    Yes,
    /// Dropped (task over, or the entry is no longer pending for us).
    Dropped,
    /// The rev moved: the current doc (`None`: the task vanished).
    Moved(Option<String>),
}

impl Claimed {
    /// What `claim.lua` replied.
    pub(super) fn from_reply(reply: &[Value]) -> Result<Claimed, RedisStoreError> {
        match reply {
            [Value::Int(1)] => Ok(Claimed::Yes),
            [Value::Int(-1)] => Ok(Claimed::Dropped),
            [Value::Int(0)] => Ok(Claimed::Moved(None)),
            [Value::Int(0), current] => redis::from_redis_value_ref(current)
                .map(Claimed::Moved)
                .map_err(|err| RedisStoreError::Corrupt(err.to_string())),
            other => Err(RedisStoreError::Corrupt(format!("unexpected claim reply: {other:?}"))),
        }
    }

    /// What `claim_batch.lua` replied for one entry: `claim.lua`'s reply
    /// without its table (1, -1, the current doc, or 0 for a vanished task).
    pub(super) fn from_batch_reply(reply: &Value) -> Result<Claimed, RedisStoreError> {
        match reply {
            Value::Int(1) => Ok(Claimed::Yes),
            Value::Int(-1) => Ok(Claimed::Dropped),
            Value::Int(0) => Ok(Claimed::Moved(None)),
            Value::BulkString(_) => redis::from_redis_value_ref(reply)
                .map(|doc| Claimed::Moved(Some(doc)))
                .map_err(|err| RedisStoreError::Corrupt(err.to_string())),
            other => Err(RedisStoreError::Corrupt(format!("unexpected claim_batch reply: {other:?}"))),
        }
    }
}

/// What fraction of a lease a delivery's lease may have run for a claim to
/// keep it (`claim_batch.lua`'s ARGV[5n+5]) rather than start a new one.
const KEEP_DELIVERY_LEASE: u32 = 8;

impl Queue {
    /// The revision of the task as read (what the claim expects stored) and
    /// the task as claimed by `worker`, made from it in place; or `None`
    /// after dropping the entry (task gone, expired, terminal or corrupt).
    pub(super) async fn next_claimed(
        &self,
        worker: &str,
        e: &Entry,
        id: &TaskId,
        doc: Option<&str>,
    ) -> Result<Option<(u64, presa_store::Task)>, RedisStoreError> {
        let task = match doc.map(|d| decode(d.as_bytes())) {
            Some(Ok(t)) if !t.status.is_terminal() && !t.is_expired(now_ms()) => t,
            Some(Err(err)) => {
                tracing::error!(task = %id, error = %err, "corrupt task record; its work is dropped");
                self.ack(e.partition, &e.id).await?;
                return Ok(None);
            }
            _ => {
                self.ack(e.partition, &e.id).await?;
                return Ok(None);
            }
        };
        let expected = task.revision;
        match claim(task, worker, now_ms()) {
            Some(next) => Ok(Some((expected, next))),
            None => {
                self.ack(e.partition, &e.id).await?;
                Ok(None)
            }
        }
    }

    /// Run `claim_batch.lua` over `group`: one reply per entry, in order.
    pub(super) async fn claim_batch(
        &self,
        worker: &str,
        group: &[Pending],
        lease: Duration,
    ) -> Result<Vec<Claimed>, RedisStoreError> {
        let keys = &self.link.keys;
        let mut inv = super::CLAIM_BATCH.prepare_invoke();
        for p in group {
            let channel = keys.events(&p.id).expect("same partition as the task key");
            inv.key(&p.key).key(keys.work(p.entry.partition)).key(channel).key(keys.claimed(p.entry.partition));
        }
        inv.arg(GROUP).arg(worker).arg(self.lease_idle(lease)).arg(self.link.topology.publish_cmd());
        for p in group {
            inv.arg(&p.entry.id).arg(p.expected).arg(encode(&p.next)?).arg(p.next.revision).arg(p.next.attempt);
        }
        // A delivery's lease younger than an eighth of it is kept: renewed a
        // third of a lease after the claim, it never lapses on a live worker.
        inv.arg((lease / KEEP_DELIVERY_LEASE).as_millis() as u64);
        let replies: Vec<Value> = self.link.invoke(&inv).await?;
        if replies.len() != group.len() {
            return Err(RedisStoreError::Corrupt(format!(
                "claim_batch.lua answered {} of {} entries",
                replies.len(),
                group.len()
            )));
        }
        replies.iter().map(Claimed::from_batch_reply).collect()
    }

    /// Claim one delivered entry with `claim.lua`, starting from `doc` (the
    /// task as last read), re-reading on each lost CAS race.
    pub(super) async fn claim_entry(
        &self,
        worker: &str,
        p: &Pending,
        mut doc: Option<String>,
        lease: Duration,
    ) -> Result<Option<Claim>, RedisStoreError> {
        let (e, id, key) = (&p.entry, &p.id, p.key.as_str());
        let keys = &self.link.keys;
        let stream = keys.work(e.partition);
        let channel = keys.events(id).expect("same partition as the task key");
        let claimed_channel = keys.claimed(e.partition);
        for _ in 0..CLAIM_RACES {
            let Some((expected, next)) = self.next_claimed(worker, e, id, doc.as_deref()).await? else {
                return Ok(None);
            };
            let mut inv = super::CLAIM.prepare_invoke();
            inv.key(key)
                .key(&stream)
                .key(&channel)
                .key(&claimed_channel)
                .arg(GROUP)
                .arg(&e.id)
                .arg(worker)
                .arg(expected)
                .arg(encode(&next)?)
                .arg(next.revision)
                .arg(next.attempt)
                .arg(self.lease_idle(lease))
                .arg(self.link.topology.publish_cmd());
            let reply: Vec<Value> = self.link.invoke(&inv).await?;
            match Claimed::from_reply(&reply)? {
                Claimed::Yes => {
                    return Ok(Some(Claim {
                        deliveries: next.deliveries(),
                        receipt: e.receipt().to_string(),
                        task: next,
                    }));
                }
                Claimed::Dropped => return Ok(None),
                Claimed::Moved(current) => doc = current,
            }
        }
        tracing::warn!(task = %id, "claim kept losing its CAS race; requeued");
        self.requeue(worker, e).await?;
        Ok(None)
    }
}
