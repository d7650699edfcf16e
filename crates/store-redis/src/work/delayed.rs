//! Work put off until a time ([`presa_store::WorkQueue::defer`]): a
//! deferral (`defer.lua`: the task's write, and its work leaving the stream
//! for the partition's delayed set), the promotion of what came due
//! (`promote.lua`, run by claims) and an operator's "retry now"
//! (`retry_now.lua`).
//!
//! **Who promotes, and when.** Every claim looks whether promotion is due
//! ([`Delayed::due`]): when the earliest due time this store has heard of
//! (from its own deferrals and from the last promotion's reply) has come,
//! and at least every [`PROMOTE_EVERY`] to hear of other processes'
//! deferrals. A waiting claim wakes for the earliest due time it knows
//! ([`Delayed::until_next`]). So a due entry is queued within
//! [`PROMOTE_EVERY`] by some idle worker, and at once by one that knows of
//! it; promotions by several workers at once are harmless (each member is
//! queued by whoever removes it). The cost is one script a second per idle
//! worker, whatever the number of waiting tasks.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use futures::future::join_all;
use presa_store::{Cas, Claim, Task, TaskId, util::now_ms};
use redis::Value;

use super::Queue;
use crate::{
    error::RedisStoreError,
    keys::GROUP,
    record::{decode_live, encode},
    records::Transitioned,
};

/// How often claims look for due work they have not heard of (another
/// process's deferral): the most a due entry waits beyond that, while some
/// worker is claiming.
pub(super) const PROMOTE_EVERY: Duration = Duration::from_secs(1);

/// The most members one promotion queues per partition (a burst of due
/// work is queued over several claims, each bounded).
const PROMOTE_BATCH: usize = 512;

/// What this store knows of its delayed work: when it last promoted, and the
/// earliest due time it has heard of.
#[derive(Debug)]
pub(crate) struct Delayed {
    born: Instant,
    /// When a claim last promoted, ms after `born` (0: never).
    last_ms: AtomicU64,
    /// The earliest due time heard of, Unix ms (`u64::MAX`: none).
    next_due_ms: AtomicU64,
}

impl Default for Delayed {
    fn default() -> Self {
        Delayed { born: Instant::now(), last_ms: AtomicU64::new(0), next_due_ms: AtomicU64::new(u64::MAX) }
    }
}

impl Delayed {
    /// Whether a claim should promote now (see the module docs); the claim
    /// that gets `true` promotes.
    pub(super) fn due(&self) -> bool {
        let known = self.next_due_ms.load(Ordering::Relaxed);
        if known <= now_ms() {
            self.next_due_ms.store(u64::MAX, Ordering::Relaxed);
            self.last_ms.store(self.elapsed_ms(), Ordering::Relaxed);
            return true;
        }
        super::recovery::due(&self.last_ms, &self.born, PROMOTE_EVERY)
    }

    /// How long until the earliest due time heard of (`None`: none heard of).
    pub(super) fn until_next(&self) -> Option<Duration> {
        let known = self.next_due_ms.load(Ordering::Relaxed);
        (known != u64::MAX).then(|| Duration::from_millis(known.saturating_sub(now_ms())))
    }

    /// Work is due at `due_ms`: promote by then.
    fn heard_of(&self, due_ms: u64) {
        self.next_due_ms.fetch_min(due_ms, Ordering::Relaxed);
    }

    fn elapsed_ms(&self) -> u64 {
        (self.born.elapsed().as_millis() as u64).max(1)
    }
}

impl Queue {
    /// `defer.lua`: write `next` under `claim` and move its work to the
    /// delayed set, due at `due_at_ms`.
    pub(crate) async fn defer(&self, next: &Task, claim: &Claim, due_at_ms: u64) -> Result<Cas, RedisStoreError> {
        let keys = &self.link.keys;
        let (Some(key), Some(channel), Some(entry)) =
            (keys.task(&next.id), keys.events(&next.id), self.entry_of(claim))
        else {
            return Ok(Cas::Conflict(None));
        };
        let (Some(partition), Some(expected)) = (keys.partition_of(&next.id), next.revision.checked_sub(1)) else {
            return Ok(Cas::Conflict(None));
        };
        let mut inv = super::DEFER.prepare_invoke();
        inv.key(key)
            .key(channel)
            .key(keys.work(partition))
            .key(keys.delayed(partition))
            .arg(expected)
            .arg(claim.task.attempt)
            .arg(encode(next)?)
            .arg(next.revision)
            .arg(next.status.as_str())
            .arg(self.link.topology.publish_cmd())
            .arg(GROUP)
            .arg(entry)
            .arg(due_at_ms)
            .arg(next.id.as_str());
        let reply: Vec<Value> = self.link.invoke(&inv).await?;
        Ok(match Transitioned::from_reply(&reply)? {
            Transitioned::Written | Transitioned::WrittenCounted(_) => {
                self.state.delayed.heard_of(due_at_ms);
                Cas::Applied(next.clone())
            }
            Transitioned::Conflict(stored) => Cas::Conflict(decode_live(stored.as_deref().map(str::as_bytes))?),
            Transitioned::OverQuota => {
                return Err(RedisStoreError::Corrupt("defer.lua answered over quota".into()));
            }
        })
    }

    /// `promote.lua` over every partition (one script on a standalone
    /// server, one per partition on a cluster): queue the work that came
    /// due. How many entries it queued.
    pub(super) async fn promote(&self) -> Result<u64, RedisStoreError> {
        let run = |parts: Vec<u16>| {
            let mut inv = super::PROMOTE.prepare_invoke();
            for p in parts {
                inv.key(self.link.keys.delayed(p)).key(self.link.keys.work(p)).key(self.link.keys.wake(p));
            }
            inv.arg(now_ms()).arg(PROMOTE_BATCH).arg(self.link.topology.wake_cmd());
            async move { self.link.invoke::<(u64, i64)>(&inv).await }
        };
        let partitions = (0..self.link.keys.partitions()).collect();
        let groups = self.link.topology.script_groups(partitions, |p| *p);
        let mut queued = 0;
        for reply in join_all(groups.into_iter().map(run)).await {
            let (n, next_due) = reply?;
            queued += n;
            if let Ok(due) = u64::try_from(next_due) {
                self.state.delayed.heard_of(due);
            }
        }
        Ok(queued)
    }

    /// `retry_now.lua`: make task `id`'s waiting work due now, and queue it.
    pub(crate) async fn retry_now(&self, id: &TaskId) -> Result<bool, RedisStoreError> {
        let Some(partition) = self.link.keys.partition_of(id) else {
            return Ok(false);
        };
        let mut inv = super::RETRY_NOW.prepare_invoke();
        inv.key(self.link.keys.delayed(partition)).arg(id.as_str()).arg(now_ms());
        let waiting = self.link.invoke::<i64>(&inv).await? == 1;
        if waiting {
            self.state.delayed.heard_of(0);
            self.promote().await?;
        }
        Ok(waiting)
    }
}
